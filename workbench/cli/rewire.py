"""`workbench rewire`: not built yet (see the issue that owns it)."""

NAME = "rewire"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench rewire: not built yet")
    return 2
