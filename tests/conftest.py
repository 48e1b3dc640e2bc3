"""Shared fixtures. ``smoke_demo``: the built-in demo at size smoke, built once per test session."""

import pytest


@pytest.fixture(scope="session")
def smoke_demo(tmp_path_factory):
    """Path of a finished ``workbench demo --size smoke`` build (tokenizer, target, data, drafts)."""
    from workbench.demo import build_demo

    return build_demo(tmp_path_factory.mktemp("demo") / "demo", size="smoke", seed=0, progress=False)
