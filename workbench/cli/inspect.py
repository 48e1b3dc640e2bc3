"""`workbench inspect`: not built yet (see the issue that owns it)."""

NAME = "inspect"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench inspect: not built yet")
    return 2
