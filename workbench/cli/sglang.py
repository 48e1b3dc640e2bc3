"""`workbench sglang`: not built yet (see the issue that owns it)."""

NAME = "sglang"
HELP = "(not built yet)"


def add_arguments(parser):
    pass


def run(args):
    print("workbench sglang: not built yet")
    return 2
