"""`workbench demo`: not built yet (see the issue that owns it)."""

NAME = "demo"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench demo: not built yet")
    return 2
