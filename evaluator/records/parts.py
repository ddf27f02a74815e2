"""One part of an evaluation split across evaluators (``--shard I/N``), and how parts are merged.

A part is what each of its images gave — the generated caption, its captions' summed word loss
and words — not scores.  Scoring happens once, on the merged images, by the same code one
evaluator runs: CIDEr's document frequencies and METEOR's corpus aggregate are whole-set
quantities that no sum of parts' scores gives back, so a merged record is exactly the record one
evaluator would write (the loss's sum is regrouped: equal to ≈ 1e-12).  The images of part I are
the set's positions I, I + N, I + 2N …, so the merge interleaves the parts back into the set's
order, the order the bootstrap's resamples are drawn in.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


class PartsMismatch(ValueError):
    """Parts that are not one evaluation's (another split, set or image order)."""


@dataclass(frozen=True)
class SetPart:
    """Part ``shard`` (I, N) of one evaluation set: its images in the set's order, each one's caption
    and summed loss and words; ``examples`` captions scored; ``unknown_words`` reference words the
    model's vocabulary lacks (None: the same vocabulary); ``costs`` as an ``EvalResult``'s."""

    eval_set: str
    shard: tuple[int, int]
    image_ids: Sequence[int]
    captions: Sequence[str]
    loss_sums: Sequence[float]
    words: Sequence[float]
    examples: int
    unknown_words: int | None = None
    seconds: float = 0.0
    costs: dict = field(default_factory=dict)
    # The part's images and references as it read them (``evaluation.set_fingerprint`` of its ids):
    # part 0 computes the same from its own copy of the set — another copy, seed or set differs.
    fingerprint: str = ""

    def header(self) -> dict:
        return {"eval_set": self.eval_set, "shard": list(self.shard), "examples": self.examples,
                "unknown_words": self.unknown_words, "seconds": self.seconds, "costs": self.costs,
                "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class PartStats:
    """A part's evaluation of every set, as an evaluation's per-image statistics: what its history
    row keeps (``image_stats``) and its part file holds (``records/parts_dir.py``)."""

    sets: Sequence[SetPart]

    def to_bytes(self) -> bytes:
        return to_bytes({}, self.sets)


@dataclass(frozen=True)
class Merged:
    """Several parts of one set as one evaluation's images, in the set's order."""

    image_ids: list[int]
    captions: dict[int, str]
    image_losses: dict[int, tuple[float, float]]
    loss: float
    examples: int
    unknown_words: int | None
    seconds: float  # the slowest part's
    costs: dict


def merge(parts: Sequence[SetPart], set_order: Sequence[int] | None = None,
          fingerprint: Callable[[Sequence[int]], str] | None = None) -> Merged:
    """Every part of one set, once each, interleaved back into the set's order.  With ``set_order`` (the
    set's image ids as one evaluator reads them) each part must hold exactly its positions of it;
    with ``fingerprint`` (ids → that set's fingerprint of them) each part must have read the same
    images and references.  ``PartsMismatch`` names the part and what differs."""
    if not parts:
        raise PartsMismatch("no parts to merge")
    count = parts[0].shard[1]
    by_index = {p.shard[0]: p for p in parts}
    one_each = sorted(by_index) == list(range(count)) and len(parts) == count
    if {p.shard[1] for p in parts} != {count} or not one_each:
        raise PartsMismatch(f"parts {sorted(f'{i}/{n}' for i, n in (p.shard for p in parts))} are not "
                            f"each of {count} once")
    if len({p.eval_set for p in parts}) != 1:
        raise PartsMismatch(f"parts of different sets: {sorted({p.eval_set for p in parts})}")
    sizes = [len(by_index[i].image_ids) for i in range(count)]
    if any(sizes[i] < sizes[i + 1] or sizes[i] > sizes[i + 1] + 1 for i in range(count - 1)):
        raise PartsMismatch(f"parts of {sizes} images cannot be one set's positions I, I + {count} …")
    order = [(by_index[i], j) for j in range(max(sizes, default=0)) for i in range(count) if j < sizes[i]]
    ids = [int(p.image_ids[j]) for p, j in order]
    if len(set(ids)) != len(ids):
        raise PartsMismatch("an image is in two parts")
    for index in range(count):
        _check_part(by_index[index], set_order, fingerprint)
    losses = {int(p.image_ids[j]): (float(p.loss_sums[j]), float(p.words[j])) for p, j in order}
    total = float(np.sum([v[0] for v in losses.values()], dtype=np.float64)) if losses else 0.0
    words = float(np.sum([v[1] for v in losses.values()], dtype=np.float64)) if losses else 0.0
    unknown = [p.unknown_words for p in parts if p.unknown_words is not None]
    return Merged(
        image_ids=ids, captions={int(p.image_ids[j]): str(p.captions[j]) for p, j in order},
        image_losses=losses, loss=total / max(words, 1.0), examples=sum(p.examples for p in parts),
        unknown_words=sum(unknown) if unknown else None, seconds=max(p.seconds for p in parts),
        costs=_merged_costs([p.costs for p in parts]))


def _check_part(part: SetPart, order: Sequence[int] | None,
                fingerprint: Callable[[Sequence[int]], str] | None) -> None:
    """``part`` is exactly its positions of ``order`` and read the images and references part 0 did."""
    index, count = part.shard
    name = f"part {index}/{count} of set {part.eval_set}"
    if order is not None:
        expected, found = [int(i) for i in order[index::count]], [int(i) for i in part.image_ids]
        if found != expected:
            first = next((n for n, (a, b) in enumerate(zip(found, expected, strict=False)) if a != b), None)
            what = (f"image {found[first]} where this set has {expected[first]}" if first is not None else
                    f"it holds {len(found)} images, this set has {len(expected)} there")
            raise PartsMismatch(f"{name} is not this set's positions {index}, {index + count} … ({what})")
    if fingerprint is not None:
        own = fingerprint(part.image_ids)
        if part.fingerprint != own:
            raise PartsMismatch(f"{name} read other images or references than part 0 (set fingerprint "
                                f"{part.fingerprint[:12] or 'none'}, part 0's {own[:12]}): another copy, "
                                "seed or set of the data")


def _merged_costs(costs: Sequence[dict]) -> dict:
    """Images reused and computed summed over the parts; each figure of ``seconds`` the slowest
    part's (the parts run side by side); how features were had, each part's if they differ."""
    kinds = [c.get("features", "") for c in costs]
    out = {"features": kinds[0] if len(set(kinds)) == 1 else ",".join(kinds),
           "images_reused": sum(c.get("images_reused", 0) for c in costs),
           "images_computed": sum(c.get("images_computed", 0) for c in costs),
           "encoder": costs[0].get("encoder", ""), "parts": len(costs), "seconds": {}}
    for c in costs:
        for name, value in c.get("seconds", {}).items():
            out["seconds"][name] = max(out["seconds"].get(name, 0.0), value)
    return out


def to_bytes(header: dict, parts: Sequence[SetPart]) -> bytes:
    """A checkpoint's part file: ``header`` (what was evaluated, by whom) and each set's part."""
    arrays: dict[str, np.ndarray] = {}
    for n, part in enumerate(parts):
        arrays[f"{n}_image_ids"] = np.asarray(part.image_ids, dtype=np.int64)
        arrays[f"{n}_captions"] = np.asarray(list(part.captions), dtype=np.str_)
        arrays[f"{n}_loss_sums"] = np.asarray(part.loss_sums, dtype=np.float64)
        arrays[f"{n}_words"] = np.asarray(part.words, dtype=np.float64)
    meta = {**header, "sets": [p.header() for p in parts]}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, header=np.str_(json.dumps(meta)), **arrays)
    return buffer.getvalue()


def from_bytes(data: bytes) -> tuple[dict, list[SetPart]]:
    """``to_bytes`` read back: the header and the sets' parts (``ValueError`` if it is not one)."""
    try:
        with np.load(io.BytesIO(data)) as saved:
            meta = json.loads(str(saved["header"]))
            parts = [SetPart(eval_set=s["eval_set"], shard=(int(s["shard"][0]), int(s["shard"][1])),
                             image_ids=saved[f"{n}_image_ids"].tolist(),
                             captions=saved[f"{n}_captions"].tolist(),
                             loss_sums=saved[f"{n}_loss_sums"].tolist(), words=saved[f"{n}_words"].tolist(),
                             examples=int(s["examples"]), unknown_words=s["unknown_words"],
                             seconds=float(s["seconds"]), costs=s["costs"],
                             fingerprint=str(s.get("fingerprint", "")))
                     for n, s in enumerate(meta.pop("sets"))]
    except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"not a part file ({type(exc).__name__}: {exc})") from exc
    return meta, parts
