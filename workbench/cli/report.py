"""`workbench report`: not built yet (see the issue that owns it)."""

NAME = "report"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench report: not built yet")
    return 2
