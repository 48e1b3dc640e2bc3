"""`workbench wiring`: not built yet (see the issue that owns it)."""

NAME = "wiring"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench wiring: not built yet")
    return 2
