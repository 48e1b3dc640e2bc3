"""`workbench bench`: not built yet (see the issue that owns it)."""

NAME = "bench"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench bench: not built yet")
    return 2
