"""`workbench accept`: not built yet (see the issue that owns it)."""

NAME = "accept"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench accept: not built yet")
    return 2
