"""`workbench draft PATH [--target TARGET]`: load an EAGLE-3 draft checkpoint strictly and report it.

    $ workbench draft data/demo/draft-aligned --target data/demo/target
"""

import json

NAME = "draft"
HELP = "load an EAGLE-3 draft checkpoint (strict keys) and report what it is"


def add_arguments(parser):
    parser.add_argument("path", help="draft directory (config.json + model.safetensors / pytorch_model.bin)")
    parser.add_argument("--target", help="target model directory: checks the draft fits it, embeds from it")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    parser.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16 on CUDA), fp32, bf16, fp16")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow the target's remote code")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args):
    from workbench.core.devices import parse_dtype, resolve_device
    from workbench.core.setting import SCHEMA_VERSION
    from workbench.model import checkpoint
    from workbench.model import draft as draft_mod

    device = resolve_device(args.device)
    dtype = parse_dtype(args.dtype, device)
    target = None
    if args.target:
        from workbench.load import inputs
        target = inputs.target(args.target, device=device, dtype=dtype,
                               trust_remote_code=args.trust_remote_code, progress=False)
    d = checkpoint.load_draft(args.path, target, device=device, dtype=dtype)
    info = draft_mod.describe_draft(d)
    print(json.dumps({"schema_version": SCHEMA_VERSION, **info}, indent=2) if args.json else info.summary())
    return 0
