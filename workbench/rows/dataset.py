"""The draft's training data: load, describe, validate, summarise and preview tokenised rows.

    >>> from workbench import rows as data
    >>> ds = data.load([{"input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]}])  # SpecForge-style row
    >>> row = ds.rows()[0]
    >>> row["n_prompt_tokens"], row["n_response_tokens"], row["seq_len"], row["_where"]
    (2, 2, 4, '<memory>:row 0')
    >>> ds.validate().ok
    True
    >>> print(ds.notices[0])
    seq_len derived from len(input_ids)

Sources: JSON Lines (plain or gzip, detected by content), Parquet, a folder written by
``datasets.Dataset.save_to_disk``, an in-memory ``datasets.Dataset``, or a list of dicts. Rows are
streamed: iterating a ``Dataset`` reads the file one line (or one Parquet batch) at a time, and
``len(ds)`` counts lines without parsing them.

Every row comes out in the canonical schema: ``input_ids`` (list[int]), ``loss_mask`` (list of 0/1,
same length), ``seq_len``, ``n_prompt_tokens``, ``n_response_tokens`` (int), ``source`` (str), plus
``_row`` (0-based record index in the source, stable whatever ``on_error`` is) and ``_where``
(``"file:line"`` for JSON Lines, ``"file:row N"`` otherwise). Other keys pass through unchanged.
Known aliases (``token_ids`` → ``input_ids``, ``labels`` with -100 → ``loss_mask``, ...) are mapped and
missing counts derived, each with a notice in ``ds.notices``. The prompt is the leading run of
``loss_mask == 0``; the response is everything after it (``n_prompt_tokens + n_response_tokens ==
seq_len``).

Provenance: an optional per-row ``generation`` object records how the response was made, e.g.
``{"by": "target", "temperature": 0.0, "top_p": 1.0, "top_k": -1, "seed": null, "dtype": "bf16",
"max_new_tokens": null}`` (``workbench regenerate`` writes it; see :data:`GENERATION_FIELDS`).
``by`` is required (``"target"``, ``"server"``, ``"human"``, another model's name, ...); the other
fields are optional and checked when present; unknown fields pass through. Later results read it to
know what they measure (sampled data is judged by its settings, not by greedy agreement);
``inspect`` counts, per source, how the rows were made.

Bad rows: ``on_error="raise"`` stops at the first one with a one-line ``WorkbenchError``
(``file:line: field: what is wrong (expected ...)``); ``on_error="skip"`` drops them, counts them in
``ds.n_skipped`` and warns once at the end of the pass. ``ds.validate()`` reports every problem.
"""

from __future__ import annotations

import copy
import gzip
import json
import warnings
import zlib
from array import array
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from workbench.core.errors import WorkbenchError
from workbench.core.files import is_path
from workbench.rows.hub import hub_records
from workbench.rows.preview import (
    Preview,
    decode_ids,
    preview_html,
    preview_text,
    vocab_size_of,
)
from workbench.rows.reports import (
    Description,
    Inspection,
    KeyInfo,
    ValidationReport,
    summary_frame,
)
from workbench.rows.schema import (
    ALIASES,
    CANONICAL,
    ID_KEYS,
    RESERVED,
    Problem,
    Row,
    as_list,
    check_generation,
    did_you_mean,
    first_line,
    generation_label,
    is_int,
    one_line,
    short,
    type_name,
)

# ----------------------------------------------------------------------------------------------- results

# ----------------------------------------------------------------------------------------------- loading

def load(source, *, tokenizer=None, vocab_size: int | None = None, on_error: str = "raise") -> "Dataset":
    """Open ``source`` (path to .jsonl/.jsonl.gz/.parquet/save_to_disk folder, ``datasets.Dataset``, list of
    dicts) as a streamed :class:`Dataset`. Unusable input raises :class:`WorkbenchError` right here.

        >>> load([{"token_ids": [1, 2, 3], "n_prompt_tokens": 1}]).rows()[0]["loss_mask"]
        [0, 1, 1]

    ``tokenizer`` (an object with ``decode`` and ``len``, or a local folder) enables the vocab-size check and
    decoded previews; ``vocab_size`` checks ids without a tokenizer.
    """
    if on_error not in ("raise", "skip"):
        raise WorkbenchError(f"on_error={on_error!r} is not supported (expected 'raise' or 'skip')")
    if is_path(tokenizer):
        tokenizer = load_tokenizer(tokenizer)
    if vocab_size is None and tokenizer is not None:
        vocab_size = vocab_size_of(tokenizer)
    if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0):
        raise WorkbenchError(f"vocab_size={vocab_size!r} is not a positive int")
    if isinstance(source, Dataset):  # re-wrap: same rows, these options
        ds = copy.copy(source)
        ds.tokenizer, ds.vocab_size, ds.on_error, ds.n_skipped, ds._notices = tokenizer, vocab_size, on_error, 0, {}
    else:
        ds = Dataset(source, tokenizer=tokenizer, vocab_size=vocab_size, on_error=on_error)
    ds._check_usable()
    return ds


def open_records(source) -> "Dataset":
    """``source`` as raw records (conversations, prompts or rows: any JSON objects); iterate ``.records()``.

        >>> [rec for _, _, rec in open_records([{"turns": ["Hi"]}]).records()]
        [{'turns': ['Hi']}]
    """
    ds = Dataset(source, raw=True)
    if next(ds.records(), None) is None:
        raise WorkbenchError(f"{ds.name}: no rows (expected at least one record)")
    return ds


def json_array(p: Path) -> list:
    """A ``.json`` file holding one array of objects (a ShareGPT dump), read whole."""
    try:
        with open(p, encoding="utf-8") as f:
            out = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WorkbenchError(f"{p}: not a valid JSON array ({first_line(e)})") from None
    if not isinstance(out, list):
        raise WorkbenchError(f"{p}: a JSON {type_name(out)} (expected an array of objects or JSON Lines)")
    return out


def load_tokenizer(path):
    """A local tokenizer folder → ``transformers`` tokenizer (no hub access, no remote code)."""
    p = Path(path)
    if not p.exists():
        raise WorkbenchError(f"tokenizer {path}: no such file or folder (expected a local folder with tokenizer.json)")
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(str(p), trust_remote_code=False, local_files_only=True)
    except Exception as e:  # transformers raises many types for bad folders
        raise WorkbenchError(f"tokenizer {path}: cannot load it ({type(e).__name__}: {first_line(e)})") from None


class Dataset:
    """Streamed rows in the canonical schema; see the module docstring. Build with :func:`load`.

    ``len(ds)`` is the number of records in the source (with ``on_error="skip"`` a pass may yield fewer;
    ``ds.n_skipped`` holds how many the last full pass dropped).
    """

    def __init__(self, source, *, tokenizer=None, vocab_size=None, on_error="raise", raw: bool = False):
        self.raw = raw                      # raw: any records (conversations, prompts); no input_ids needed
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.on_error = on_error
        self.n_skipped = 0
        self._notices: dict[str, None] = {}
        self._len: int | None = None
        self._hf = self._list = self.path = None
        self._open(source)

    # -- source detection -------------------------------------------------------------------------
    def _open(self, source) -> None:
        mod, cls = type(source).__module__, type(source).__name__
        if mod.startswith("datasets"):
            if cls == "DatasetDict":
                raise WorkbenchError(f"a DatasetDict with splits {list(source)} (expected one split, e.g. ds[{next(iter(source), 'train')!r}])")
            if cls != "Dataset":
                raise WorkbenchError(f"a datasets.{cls} (expected a datasets.Dataset, a file or a save_to_disk folder)")
            self._hf, self.name, self.format, self.default_source = source, "<datasets.Dataset>", "datasets.Dataset", "memory"
            self._columns(list(source.column_names))
            return
        if isinstance(source, (list, tuple)):
            self._list, self.name, self.format, self.default_source = list(source), "<memory>", "list of dicts", "memory"
            return
        if not is_path(source):
            raise WorkbenchError(f"cannot load a {cls} (expected a path, a datasets.Dataset or a list of dicts)")
        if str(source).startswith("hf:"):                     # a hub dataset by name (rows.hub)
            self._list, self.name, self.format = hub_records(str(source)), str(source), "hub dataset"
            self.default_source = str(source)[3:].split(":")[0].split("/")[-1]
            return
        p = Path(source)
        self.path, self.name = p, str(source)
        stem = p.name
        for suf in (".gz", ".jsonl", ".json", ".parquet", ".pq"):
            stem = stem[: -len(suf)] if stem.endswith(suf) and len(stem) > len(suf) else stem
        self.default_source = stem
        if not p.exists():
            raise WorkbenchError(f"{source}: no such file or folder")
        if p.is_dir():
            return self._open_dir(p)
        with open(p, "rb") as f:
            magic = f.read(4)
        if not magic:
            raise WorkbenchError(f"{source}: empty file (0 bytes; expected JSON Lines, Parquet or a save_to_disk folder)")
        if magic == b"PAR1":
            self.format = "Parquet"
            try:
                import pyarrow.parquet as pq
                meta = pq.ParquetFile(p)
                self._len = meta.metadata.num_rows
                self._columns(list(meta.schema_arrow.names))
            except WorkbenchError:
                raise
            except Exception as e:
                raise WorkbenchError(f"{source}: unreadable Parquet file ({type(e).__name__}: {first_line(e)})") from None
        elif magic.lstrip()[:1] == b"[" and p.suffix == ".json":   # one JSON array (ShareGPT dumps)
            self._list, self.format = json_array(p), "JSON array"
        else:
            self.format = "JSON Lines (gzip)" if magic[:2] == b"\x1f\x8b" else "JSON Lines"

    def _open_dir(self, p: Path) -> None:
        if (p / "dataset_dict.json").exists():
            try:
                splits = json.loads((p / "dataset_dict.json").read_text())["splits"]
            except Exception:
                splits = sorted(q.name for q in p.iterdir() if q.is_dir())
            raise WorkbenchError(f"{p}: a DatasetDict folder with splits {splits} (expected one split, e.g. {p / str(splits[0]) if splits else p}/)")
        if not (p / "state.json").exists():
            raise WorkbenchError(f"{p}: a folder but not a dataset saved with datasets.save_to_disk (no state.json; "
                                 f"expected that, a .jsonl or a .parquet file)")
        try:
            from datasets import load_from_disk
            hf = load_from_disk(str(p))
        except Exception as e:
            raise WorkbenchError(f"{p}: cannot load with datasets.load_from_disk ({type(e).__name__}: {first_line(e)})") from None
        if type(hf).__name__ != "Dataset":
            raise WorkbenchError(f"{p}: load_from_disk gave a {type(hf).__name__} (expected one split, a datasets.Dataset)")
        self._hf, self.format = hf, "datasets save_to_disk folder"
        self._columns(list(hf.column_names))

    def _columns(self, cols: list[str]) -> None:
        """Columnar sources know their schema up front: no input_ids (or alias) column = unusable."""
        if self.raw:
            return
        if not any(k in cols for k in ID_KEYS):
            raise WorkbenchError(f"{self.name}: none of the expected columns (input_ids or {', '.join(ALIASES['input_ids'])}) "
                                 f"among columns [{', '.join(cols)}]{did_you_mean('input_ids', cols)}")

    def _check_usable(self) -> None:
        """Empty source or a first record that is not an object: not a dataset (raises). Also seeds notices."""
        first = next(self._records(), None)
        if first is None:
            what = "no rows" if self._hf is not None or self._list is not None or self.format == "Parquet" else \
                "empty file (only blank lines)"
            raise WorkbenchError(f"{self.name}: {what} (expected at least one row)")
        row, where, rec = first
        if isinstance(rec, Problem):
            hint = "" if self._list is not None else "; this does not look like JSON Lines (one JSON object per line)"
            raise WorkbenchError(f"{rec}{hint}")
        self._canonical(rec, row, where)

    # -- raw records ------------------------------------------------------------------------------
    def _records(self, start: int = 0) -> Iterator[tuple[int, str, Any]]:
        """Yield ``(row, where, dict or Problem)`` for every record, streamed; rows before ``start`` unparsed."""
        if self._list is not None:
            for i in range(start, len(self._list)):
                rec = self._list[i]
                where = f"{self.name}:{'item' if self.format == 'JSON array' else 'row'} {i}"
                yield i, where, rec if isinstance(rec, dict) else Problem(
                    where, i, "row", f"got a {type(rec).__name__}, not a dict", "one dict per row")
        elif self._hf is not None:
            for i in range(start, len(self._hf)):
                yield i, f"{self.name}:row {i}", self._hf[i]
        elif self.format == "Parquet":
            yield from self._parquet_records(start)
        else:
            yield from self._jsonl_records(start)

    def _jsonl_records(self, start: int):
        row = 0
        for lineno, line in self._lines():
            if not line.strip():
                continue
            if row >= start:
                where = f"{self.name}:{lineno}"
                yield row, where, _parse_line(line, where, row)
            row += 1

    def _lines(self):
        lineno = 0
        with open(self.path, "rb") as raw:
            f = gzip.GzipFile(fileobj=raw) if self.format == "JSON Lines (gzip)" else raw
            try:
                for lineno, line in enumerate(f, 1):
                    yield lineno, line
            except (OSError, EOFError, zlib.error) as e:
                raise WorkbenchError(f"{self.name}:{lineno + 1}: corrupt gzip data ({first_line(e)})") from None

    def _parquet_records(self, start: int):
        import pyarrow.parquet as pq
        row = 0
        try:
            for batch in pq.ParquetFile(self.path).iter_batches(batch_size=256):
                if row + batch.num_rows <= start:
                    row += batch.num_rows
                    continue
                for rec in batch.to_pylist():
                    if row >= start:
                        yield row, f"{self.name}:row {row}", rec
                    row += 1
        except WorkbenchError:
            raise
        except Exception as e:
            raise WorkbenchError(f"{self.name}:row {row}: unreadable Parquet data ({type(e).__name__}: {first_line(e)})") from None

    # -- canonical rows ---------------------------------------------------------------------------
    def _note(self, msg: str) -> None:
        self._notices.setdefault(msg, None)

    @property
    def notices(self) -> list[str]:
        """Aliases mapped and fields derived so far (seeded from the first row at load, grows while iterating)."""
        return list(self._notices)

    def _canonical(self, rec: dict, row: int, where: str) -> tuple[Row | None, list[Problem]]:
        """Map one raw record to a canonical :class:`Row`, or return its problems (row is then None)."""
        probs: list[Problem] = []

        def bad(fld, msg, expected=None):
            probs.append(Problem(where, row, fld, msg, expected))

        keys = [str(k) for k in rec]
        vals, label, renamed = {}, {}, set()
        for fld in CANONICAL:
            label[fld] = fld
            if rec.get(fld) is not None:
                vals[fld] = rec[fld]
                continue
            for alias in ALIASES[fld]:
                if rec.get(alias) is not None:
                    vals[fld], label[fld] = rec[alias], f"{fld} (from {alias!r})"
                    renamed.add(alias)
                    self._note(f"{alias!r} read as {fld} (known alias)")
                    break

        # input_ids
        ids = as_list(vals.get("input_ids"))
        lab = label["input_ids"]
        if ids is None:
            bad("input_ids", f"missing; keys present: {', '.join(keys) or 'none'}{did_you_mean('input_ids', keys)}",
                "a list of int token ids")
            return None, probs
        if not isinstance(ids, list):
            bad(lab, f"got {type_name(ids)}", "a list of int token ids")
            return None, probs
        if not ids:
            bad(lab, "empty list", "at least one token id")
            return None, probs
        if set(map(type, ids)) != {int}:   # C-speed checks first; find the position only on failure
            nonint = [i for i, x in enumerate(ids) if type(x) is not int]
            i = nonint[0]
            more = f" ({len(nonint)} non-int values in this row)" if len(nonint) > 1 else ""
            bad(f"{lab}[{i}]", f"got {type_name(ids[i])} {short(ids[i])}{more}", "int token ids")
            return None, probs
        T = len(ids)
        if min(ids) < 0:
            neg = next(i for i, x in enumerate(ids) if x < 0)
            bad(f"{lab}[{neg}]", f"negative id {ids[neg]}", "ids >= 0")
        if self.vocab_size is not None and max(ids) >= self.vocab_size:
            over = next(i for i, x in enumerate(ids) if x >= self.vocab_size)
            bad(f"{lab}[{over}]", f"id {ids[over]} is out of range for vocab size {self.vocab_size} "
                f"(largest id in row {max(ids)})", f"ids < {self.vocab_size}")

        # seq_len
        seq_len = vals.get("seq_len")
        if seq_len is None:
            self._note("seq_len derived from len(input_ids)")
        elif not is_int(seq_len):
            bad(label["seq_len"], f"got {type_name(seq_len)} {short(seq_len)}", f"an int equal to len(input_ids) = {T}")
        elif seq_len != T:
            bad(label["seq_len"], f"{seq_len} but input_ids has {T} tokens", f"seq_len == len(input_ids) == {T}")

        # n_prompt_tokens / n_response_tokens (given)
        counts = {}
        for fld in ("n_prompt_tokens", "n_response_tokens"):
            v = vals.get(fld)
            if v is None:
                continue
            if not is_int(v) or v < 0:
                bad(label[fld], f"got {type_name(v)} {short(v)}", "a non-negative int")
                counts[fld] = "bad"
            elif v > T:
                bad(label[fld], f"{v} > {T} tokens in input_ids", f"at most len(input_ids) = {T}")
                counts[fld] = "bad"
            else:
                counts[fld] = v

        # loss_mask (given, from labels, or from n_prompt_tokens)
        mask = as_list(vals.get("loss_mask"))
        mlab = label["loss_mask"]
        if mask is None and isinstance(as_list(rec.get("labels")), list):
            labels = as_list(rec["labels"])
            mlab = "loss_mask (from 'labels')"
            if set(map(type, labels)) <= {int}:
                mask = [int(x != -100) for x in labels]
                self._note("loss_mask derived from labels (-100 = not trained)")
            else:
                mask = labels  # reported below as a bad mask
        if mask is None:
            npt = counts.get("n_prompt_tokens")
            if isinstance(npt, int):
                mask = [0] * npt + [1] * (T - npt)
                self._note("loss_mask derived from n_prompt_tokens (0 over the prompt, 1 after)")
            else:
                bad("loss_mask", f"missing; keys present: {', '.join(keys)}{did_you_mean('loss_mask', keys)}",
                    "a list of 0/1 the length of input_ids, or n_prompt_tokens to derive it")
        elif not isinstance(mask, list):
            bad(mlab, f"got {type_name(mask)}", "a list of 0/1 the length of input_ids")
            mask = None
        else:
            kinds = set(map(type, mask))
            if not (kinds <= {int, bool} and set(mask) <= {0, 1}):
                badv = next(i for i, x in enumerate(mask) if not (type(x) in (int, bool) and x in (0, 1)))
                bad(f"{mlab}[{badv}]", f"got {type_name(mask[badv])} {short(mask[badv])}", "0 or 1")
                mask = None
            elif len(mask) != T:
                bad(mlab, f"length {len(mask)} != len(input_ids) {T}", "the same length as input_ids")
                mask = None
            elif bool in kinds:
                mask = [int(x) for x in mask]

        npt, nrt = counts.get("n_prompt_tokens"), counts.get("n_response_tokens")
        if mask is not None:
            lead = mask.index(1) if 1 in mask else T
            if npt is None:
                npt = lead
                self._note("n_prompt_tokens derived from loss_mask (its leading zeros)")
            if lead == T:
                bad(mlab, "all zero: no token is trained on", "at least one 1 over the response")
            elif isinstance(npt, int) and lead < npt:
                bad(mlab, f"1 at position {lead}, inside the prompt (n_prompt_tokens = {npt})",
                    "0 over the first n_prompt_tokens positions")
        if nrt is None and isinstance(npt, int):
            nrt = T - npt
            self._note("n_response_tokens derived as seq_len - n_prompt_tokens")
        if isinstance(npt, int) and isinstance(nrt, int) and npt + nrt != T:
            bad("n_prompt_tokens + n_response_tokens", f"{npt} + {nrt} = {npt + nrt}", f"seq_len = {T}")

        # source
        src = vals.get("source")
        if src is None:
            src = self.default_source
            self._note(f"no 'source' key: rows grouped as source {src!r}")
        elif not isinstance(src, str):
            bad(label["source"], f"got {type_name(src)} {short(src)}", "a string")

        # generation (optional provenance)
        if rec.get("generation") is not None:
            for fld, msg, exp in check_generation(rec["generation"]):
                bad(fld, msg, exp)

        if probs:
            return None, probs
        out = Row(input_ids=ids, loss_mask=mask, seq_len=T, n_prompt_tokens=npt, n_response_tokens=nrt, source=src)
        for k, v in rec.items():
            if k not in CANONICAL and k not in renamed and k not in RESERVED:
                out[k] = v
        out["_row"], out["_where"] = row, where
        return out, []

    def _checked(self, start: int = 0) -> Iterator[tuple[int, str, Any, Row | None, list[Problem]]]:
        for row, where, rec in self._records(start):
            if isinstance(rec, Problem):
                yield row, where, None, None, [rec]
            else:
                out, probs = self._canonical(rec, row, where)
                yield row, where, rec, out, probs

    # -- public -----------------------------------------------------------------------------------
    def records(self, start: int = 0) -> Iterator[tuple[int, str, Any]]:
        """The raw records, streamed: ``(row, where, dict or Problem)`` (what :func:`open_records` is for)."""
        return self._records(start)

    def __iter__(self) -> Iterator[Row]:
        skipped, first = 0, None
        for _, _, _, out, probs in self._checked():
            if probs:
                if self.on_error == "raise":
                    raise WorkbenchError(one_line(probs))
                skipped += 1
                first = first or probs[0]
                continue
            yield out
        self.n_skipped = skipped
        if skipped:
            warnings.warn(f"{self.name}: skipped {skipped} bad rows (first: {first})", stacklevel=2)

    def __len__(self) -> int:
        if self._len is None:
            if self._list is not None:
                self._len = len(self._list)
            elif self._hf is not None:
                self._len = len(self._hf)
            else:  # count non-blank lines; nothing is parsed or kept
                self._len = sum(1 for _, line in self._lines() if line.strip())
        return self._len

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, format={self.format!r}, on_error={self.on_error!r}, "
                f"vocab_size={self.vocab_size}, notices={len(self._notices)})")

    def rows(self, limit: int | None = None) -> list[Row]:
        """The first ``limit`` rows (all when None) as a list, following ``on_error``."""
        out: list[Row] = []
        if limit is not None and limit <= 0:
            return out
        for r in self:
            out.append(r)
            if limit is not None and len(out) >= limit:
                break
        return out

    def inspect(self, *, max_problems: int = 20, first_error: bool = False, limit: int | None = None) -> Inspection:
        """One streamed pass: describe the raw keys, validate every row, summarise the valid ones.

            >>> ins = load([{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "source": "a"}]).inspect()
            >>> ins.validation.ok, int(ins.summary.loc["a", "tokens"])
            (True, 3)
        """
        keys: dict[str, list] = {}          # key -> [rows, Counter(types), example]
        n_rows = n_invalid = n_problems = n_unparse = 0
        problems: list[Problem] = []
        by_field: Counter = Counter()
        stats: dict[str, dict] = {}
        gens: dict[str, Counter] = {}
        stopped = False
        for row, where, rec, out, probs in self._checked():
            if limit is not None and n_rows >= limit:
                break
            n_rows += 1
            if rec is None:
                n_unparse += 1
            else:
                for k, v in rec.items():
                    info = keys.setdefault(str(k), [0, Counter(), None])
                    v = as_list(v)
                    info[1][type_name(v)] += 1
                    if v is not None:
                        info[0] += 1
                        if info[2] is None:
                            info[2] = short(v, 60)
            if probs:
                n_invalid += 1
                n_problems += len(probs)
                for p in probs:
                    by_field[p.field.split(" (from")[0].split("[")[0]] += 1
                    if len(problems) < max_problems:
                        problems.append(p)
                if first_error:
                    stopped = True
                    break
                continue
            s = stats.setdefault(out["source"], {"tokens": 0, "loss": 0, "p": array("q"), "r": array("q"), "t": array("q")})
            s["tokens"] += out["seq_len"]
            s["loss"] += sum(out["loss_mask"])
            s["p"].append(out["n_prompt_tokens"])
            s["r"].append(out["n_response_tokens"])
            s["t"].append(out["seq_len"])
            gens.setdefault(out["source"], Counter())[generation_label(out.get("generation"))] += 1
        desc = Description(self.name, self.format, n_rows,
                           [KeyInfo(k, "|".join(sorted(c)), n, ex or "") for k, (n, c, ex) in keys.items()],
                           self.notices, n_unparse)
        val = ValidationReport(self.name, n_rows, n_invalid, problems, dict(by_field), n_problems, stopped)
        return Inspection(desc, val, summary_frame(stats), {k: dict(gens[k].most_common()) for k in sorted(gens)})

    def describe(self) -> Description:
        """Every key of the raw rows with its type(s), how many rows have it, and an example."""
        return self.inspect(max_problems=0).description

    def validate(self, *, max_problems: int = 100, first_error: bool = False) -> ValidationReport:
        """Check every row (never raises for bad rows); ``first_error=True`` stops at the first bad one."""
        return self.inspect(max_problems=max_problems, first_error=first_error).validation

    def summary(self):
        """pandas DataFrame by ``source`` (plus ``(all)`` when there are several): rows, tokens, loss tokens,
        prompt/response/sequence length quantiles. Bad rows raise (``on_error="raise"``) or are left out
        with a warning (``"skip"``)."""
        ins = self.inspect(max_problems=1, first_error=self.on_error == "raise")
        v = ins.validation
        if not v.ok:
            if self.on_error == "raise":
                raise WorkbenchError(one_line(v.problems) + " [on_error='skip' summarises the valid rows]")
            self.n_skipped = v.n_invalid
            warnings.warn(f"{self.name}: summary leaves out {v.n_invalid} bad rows (first: {v.problems[0]})", stacklevel=2)
        return ins.summary

    def get(self, i: int) -> Row:
        """Row with ``_row == i`` (streams to it); a bad row raises whatever ``on_error`` is."""
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise WorkbenchError(f"{self.name}: row index {i!r} (expected an int >= 0)")
        for row, where, rec, out, probs in self._checked(start=i):
            if probs:
                raise WorkbenchError(one_line(probs))
            return out
        n = len(self)
        raise WorkbenchError(f"{self.name}: row {i} is out of range (the dataset has {n} rows: 0..{n - 1})")

    def preview(self, i: int = 0, tokenizer=None) -> Preview:
        """Row ``i`` decoded, prompt and response (loss-mask) spans told apart: ``print(p)`` or display ``p``.

        ``tokenizer`` defaults to the one given to :func:`load`; without one the ids are shown.
        """
        tok = tokenizer if tokenizer is not None else self.tokenizer
        if is_path(tok):
            tok = load_tokenizer(tok)
        r = self.get(i)
        ids, mask = r["input_ids"], r["loss_mask"]
        if tok is not None:
            V = vocab_size_of(tok)
            big = next((x for x in ids if x >= V), None)
            if big is not None:
                raise WorkbenchError(f"{r['_where']}: input_ids: id {big} is out of range for the tokenizer's vocab size {V} (expected ids < {V})")
        dec = (lambda xs: decode_ids(tok, xs)) if tok is not None else (lambda xs: " ".join(map(str, xs)))
        spans, s = [], 0
        for p in range(1, len(ids) + 1):
            if p == len(ids) or mask[p] != mask[s]:
                spans.append((s, p, mask[s]))
                s = p
        pv = Preview(i, r["_where"], r["source"], ids, mask, r["n_prompt_tokens"],
                     [dec([x]) for x in ids], spans, [dec(ids[a:b]) for a, b, _ in spans])
        pv.text, pv.html = preview_text(pv), preview_html(pv)
        return pv


# ----------------------------------------------------------------------------------------------- module-level helpers

def _as_dataset(ds) -> Dataset:
    return ds if isinstance(ds, Dataset) else load(ds)


def describe(ds) -> Description:
    """:meth:`Dataset.describe` of a Dataset or anything :func:`load` takes."""
    return _as_dataset(ds).describe()


def validate(ds, **kw) -> ValidationReport:
    """:meth:`Dataset.validate` of a Dataset or anything :func:`load` takes."""
    return _as_dataset(ds).validate(**kw)


def summary(ds):
    """:meth:`Dataset.summary` of a Dataset or anything :func:`load` takes."""
    return _as_dataset(ds).summary()


def preview(ds, i: int = 0, tokenizer=None) -> Preview:
    """:meth:`Dataset.preview` of a Dataset or anything :func:`load` takes."""
    return _as_dataset(ds).preview(i, tokenizer)


# ----------------------------------------------------------------------------------------------- internals

def _parse_line(line: bytes, where: str, row: int):
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return Problem(where, row, "row", f"not UTF-8 text (bad byte at column {e.start + 1})", "UTF-8 JSON Lines")
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        return Problem(where, row, "row", f"not valid JSON ({e.msg} at column {e.colno})", "one JSON object per line")
    except RecursionError:
        return Problem(where, row, "row", "JSON nested too deeply", "one flat JSON object per line")
    if not isinstance(rec, dict):
        return Problem(where, row, "row", f"got a JSON {type_name(rec).split('[')[0]}, not an object",
                       'one JSON object per line, like {"input_ids": [...], "loss_mask": [...]}')
    return rec


