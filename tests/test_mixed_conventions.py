"""Issue 49, bad input: a draft config that mixes two families' conventions is refused in one line naming both keys
(never a guess): both eagle_config and dflash_config; EAGLE-3.1's per-tap norm (fc_norm / use_aux_norm) with its norm
of the concatenated taps (norm_before_fc, top level or nested)."""

import json

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.model.checkpoint import load_draft, save_draft
from workbench.model.draft import Eagle3Draft, new_draft_config

V, H = 64, 32


@pytest.fixture()
def draft_dir(tmp_path):
    torch.manual_seed(0)
    cfg = new_draft_config({"vocab_size": V, "hidden_size": H, "num_attention_heads": 4, "num_key_value_heads": 2,
                            "intermediate_size": 64}, layer_ids=[1, 3, 4])
    return save_draft(Eagle3Draft.from_config(cfg, torch.randn(V, H)), tmp_path / "draft")


def _with(folder, **keys):
    p = folder / "config.json"
    cfg = json.loads(p.read_text())
    for k, v in keys.items():
        if "." in k:
            outer, inner = k.split(".")
            cfg.setdefault(outer, {})[inner] = v
        else:
            cfg[k] = v
    p.write_text(json.dumps(cfg))
    return folder


def test_a_plain_draft_loads(draft_dir):
    assert load_draft(draft_dir, None).fc.weight.shape[0] == H


@pytest.mark.parametrize("keys, names", [
    ({"dflash_config": {"target_layer_ids": [1, 3, 4]}, "eagle_config.eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
     ("eagle_config", "dflash_config")),
    ({"fc_norm": True, "norm_before_fc": True}, ("fc_norm", "norm_before_fc")),
    ({"use_aux_norm": True, "eagle_config.norm_before_fc": True}, ("use_aux_norm", "eagle_config.norm_before_fc")),
])
def test_mixed_conventions_are_refused_in_one_line_naming_both_keys(draft_dir, keys, names):
    _with(draft_dir, **keys)
    with pytest.raises(WorkbenchError) as e:
        load_draft(draft_dir, None)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(draft_dir / "config.json")) and all(n in msg for n in names), msg


@pytest.mark.parametrize("option", ["fc_norm", "norm_before_fc"])
def test_one_eagle31_norm_alone_loads(tmp_path, option):
    cfg = new_draft_config({"vocab_size": V, "hidden_size": H, "num_attention_heads": 4, "num_key_value_heads": 2,
                            "intermediate_size": 64}, layer_ids=[1, 3, 4])
    cfg[option] = True
    folder = save_draft(Eagle3Draft.from_config(cfg, torch.randn(V, H)), tmp_path / option)
    assert load_draft(folder, None).variant[option] is True
