"""Evaluate checkpoints of one model dir on its evaluation sets: ``--data``'s validation split
and each ``--eval-set`` (``dataset.EVAL``), whole or — one part of a split evaluation — every
N-th image, returned unscored for part 0 to merge.

The model is rebuilt from the model dir's ``showtell-model.json`` (no model flags on the
evaluating machine) once, and every checkpoint is restored into the same model, so the
traced graphs are reused.  References are read once per set.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import tensorflow as tf

from showtell.api.contract import DEFAULT_SET
from showtell.captioning.data import inputs
from showtell.captioning.data.dataset import EVAL, VOCAB, read_split
from showtell.captioning.data.vocab import UNKNOWN, Vocabulary, same_ids
from showtell.captioning.model.network import build_model
from showtell.captioning.model.restoring import TRAIN_SECONDS, model_vocabulary, read_model_config, restore
from showtell.captioning.model.validation import Features, Validator
from showtell.common.errors import ModelDirError, ShowtellError
from showtell.common.model_dir import ModelDir
from showtell.evaluator.config import EvalSet
from showtell.evaluator.loop.protocol import COMPUTED, OFF, REUSED, EvalResult, Images
from showtell.evaluator.records.parts import PartsMismatch, PartStats, SetPart
from showtell.evaluator.records.parts import merge as merge_parts
from showtell.evaluator.scoring import bootstrap
from showtell.evaluator.scoring.bootstrap import Bootstrap
from showtell.evaluator.scoring.scorers import CaptionScorer, score
from showtell.metrics import Inputs

log = logging.getLogger(__name__)


def train_seconds(path: str) -> float | None:
    """The run's training seconds the trainer saved in checkpoint ``path``; None when it holds
    none (written before showtell recorded it, or by ``import-im2txt``)."""
    try:
        return float(tf.train.load_variable(path, f"{TRAIN_SECONDS}/.ATTRIBUTES/VARIABLE_VALUE"))
    except (tf.errors.OpError, ValueError):
        return None


class SetFeatures(Features, Protocol):
    """One set's kept features for one encoder, as an evaluation uses them (``features.SetFeatures``)."""

    full_disk: str

    def close(self) -> None: ...

    def result(self, reused: int) -> str: ...


class FeatureStore(Protocol):
    """Where each set's encoder features are kept (``features.FeatureStore``, which the daemon and
    the CLI make: this module needs only its shape)."""

    enabled: bool

    def digest(self, variables: list) -> tuple[str, float]: ...

    def for_set(self, data: Path, files: Sequence[str], encoder_digest: str,
                image_size: int, shard: tuple[int, int] | None = None) -> SetFeatures: ...

    def bound(self) -> list[Path]: ...


class _Loaded:
    """An evaluation set as read once: its shards, references, vocabulary and validator."""

    def __init__(self, spec: EvalSet) -> None:
        self.spec = spec
        data = read_split(spec.data, EVAL)
        self.manifest, self.vocab, self.files = data.manifest, data.vocab, data.files
        self.split_images = data.images
        # References as text: scored against the model's captions word for word, whatever ids
        # either vocabulary gives the words.
        self.references = inputs.load_references(self.files, self.vocab)
        self.images = inputs.image_fingerprints(self.files)
        # The images one evaluator evaluates, in the order it reads them: a part's are its positions.
        self.order = list(self.images)[:spec.max_examples]
        # Images whose references lost a word to the set's own vocabulary (<UNK>): no caption can
        # match them, so every metric on this set is capped — said once, and in each record.
        self.unknown_references = {i for i, refs in self.references.items()
                                   if any(UNKNOWN in ref.split() for ref in refs)}
        if self.unknown_references:
            log.warning("%s: %d of %d images' references hold words its vocabulary lacks (%s): no caption "
                        "can match them; build the set with a vocabulary that covers its references "
                        "(more training scenes, or the training data's vocabulary)", spec.data,
                        len(self.unknown_references), len(self.references), UNKNOWN)
        self.validator: Validator | None = None
        self.unknown_words: list[str] = []


class CheckpointEvaluator:
    def __init__(self, model_dir: ModelDir, data_dir: Path, max_examples: int | None = None,
                 beam_size: int = 3, samples: int = 5,
                 scorer: Callable[[], CaptionScorer] | None = None, jit_compile: bool = False,
                 bootstrap: Bootstrap | None = None, sets: Sequence[EvalSet] = (),
                 features: FeatureStore | None = None, shard: tuple[int, int] | None = None) -> None:
        """``scorer`` makes the caption scorer when the first evaluation (or ``open``) needs it:
        METEOR's JVM takes seconds to start, so the service starts it on its evaluation thread,
        not before its server answers.  ``bootstrap``: how each metric's interval is drawn.
        ``sets``: evaluation sets besides ``data_dir``'s (``DEFAULT_SET``), each evaluated after it.
        ``features``: where each set's encoder features are kept for checkpoints with the same
        encoder (``scoring/features.py``); None computes them from the images every time.
        ``shard`` (I, N): evaluate part I of N of every set and return it unscored (``part``), for
        ``merge`` to score with the others (``records/parts.py``)."""
        self.model_dir, self.data_dir = model_dir, data_dir
        self.sets = [_Loaded(EvalSet(DEFAULT_SET, data_dir, max_examples)), *map(_Loaded, sets)]
        main = self.sets[0]
        self.manifest, self.data_vocab, self.files, self.references = main.manifest, main.vocab, main.files, \
            main.references
        self.max_examples, self.beam_size, self.samples = max_examples, beam_size, samples
        self.jit_compile = jit_compile
        self.bootstrap = bootstrap or Bootstrap()
        self.features = features
        self.shard = shard if shard and shard[1] > 1 else None
        self._make_scorer = scorer
        self.scorer: CaptionScorer | None = None
        self._key: tuple | None = None
        self._model = None
        self._exported = None  # ``model_at``'s own model
        self.vocab: Vocabulary | None = None  # the model's own, as of the last evaluation

    @property
    def model(self):
        """The model as of the last evaluation (its weights are that checkpoint's)."""
        return self._model

    def model_at(self, path: str):
        """A model holding checkpoint ``path``'s weights, apart from the one evaluations restore
        into: a split evaluation's part 0 exports a merged checkpoint after it may have moved on
        (even in the middle of its next evaluation)."""
        config = read_model_config(self.model_dir)
        if self._exported is None or self._exported.config != config:
            self._exported = build_model(config)
        restore(tf.train.Checkpoint(model=self._exported), path,
                "the checkpoint is corrupt or from another model", partial=True)
        return self._exported

    @property
    def unknown_words(self) -> list[str]:
        """The default set's words the model's vocabulary lacks."""
        return self.sets[0].unknown_words

    def open(self) -> None:
        """Start the caption scorer (if any) now rather than at the first evaluation."""
        if self._make_scorer is not None and self.scorer is None:
            self.scorer = self._make_scorer()

    def close(self) -> None:
        if self.scorer is not None:
            self.scorer.close()

    def _prepare(self) -> None:
        config = read_model_config(self.model_dir)
        vocab = model_vocabulary(self.model_dir, (f"{self.data_dir}/{VOCAB}", self.data_vocab))
        if len(vocab) != config.vocab_size:
            raise ModelDirError(f"{self.model_dir}/{ModelDir.VOCAB} has {len(vocab)} words, the model "
                                f"{config.vocab_size}; it is not this model's vocabulary")
        if (config, vocab) == self._key:
            return
        log.info("building the model of %s (%s)", self.model_dir, config.shape_fields())
        if self._key is None or config != self._key[0]:
            self._model = build_model(config)
        for loaded in self.sets:
            if same_ids(loaded.vocab, vocab):  # (an imported model may have rows no word owns)
                id_map, loaded.unknown_words = None, []
            else:
                id_map, loaded.unknown_words = loaded.vocab.id_map(vocab)
                log.warning("%s was built with another vocabulary than %s: references are re-encoded "
                            "into the model's (%d of the dataset's words are not in it: %s)",
                            loaded.spec.data, self.model_dir, len(loaded.unknown_words),
                            " ".join(loaded.unknown_words[:10]) or "-")
            loaded.validator = Validator(self._model, loaded.files, vocab, beam_size=self.beam_size,
                                         max_examples=loaded.spec.max_examples, id_map=id_map,
                                         jit_compile=self.jit_compile)
        self._key, self.vocab = (config, vocab), vocab

    def evaluate(self, path: str, step: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 images: Images = None) -> EvalResult:
        """Restore ``path`` and validate it on every set; a ``ShowtellError`` explains any bad
        input.  The default set's result, the others' in its ``others``.  ``progress(images done,
        total)`` after each batch of the default set.  ``images``: the default set's first N images
        (instead of ``max_examples``), or ``--max-eval-examples auto``'s ``AutoSize``: the run's
        size for this kind of evaluation (features reused or computed), or the one this
        evaluation's own rate fits once its first batches are timed."""
        started = time.monotonic()
        self.open()
        self._prepare()
        restore(tf.train.Checkpoint(model=self._model), path,
                "the checkpoint is corrupt or from another model", partial=True)
        step = ModelDir.step_of(path) if step is None else step
        seconds = train_seconds(path)
        checkpoint = {"restore": time.monotonic() - started}
        digest = ""
        if self.features is not None and self.features.enabled:  # the checkpoint's encoder, by its values
            digest, checkpoint["digest"] = self.features.digest(self._model.encoder_weights)
        main, *others = self.sets
        result = self._evaluate_set(main, path, step, seconds, started, digest, progress, images)
        result.costs["seconds"] = checkpoint | result.costs["seconds"]
        result.others = [self._evaluate_set(other, path, step, seconds, time.monotonic(), digest)
                         for other in others]
        if self.shard is not None:  # one part file for every set
            result.stats, result.others = PartStats([r.part for r in (result, *result.others)]), []
        if self.features is not None:
            self.features.bound()
        return result

    def _evaluate_set(self, loaded: _Loaded, path: str, step: int, seconds: float | None, started: float,
                      digest: str, progress: Callable[[int, int], None] | None = None,
                      images: Images = None) -> EvalResult:
        validator = loaded.validator
        assert validator is not None
        features: SetFeatures | None = None if self.features is None else self.features.for_set(
            loaded.spec.data, loaded.files, digest, self._model.config.image_size, self.shard)
        try:
            if callable(images):  # --max-eval-examples auto: sized for what this evaluation costs
                sizer, kind = images, REUSED if features is not None and features.cached else COMPUTED
                known = sizer.known(kind)
                limit = None if known is not None else (lambda rate: sizer(
                    rate, loaded.split_images, validator.batch_size, kind))
                validation = validator.run(progress, split_images=loaded.split_images, features=features,
                                           max_images=known, limit=limit, shard=self.shard)
            else:
                validation = validator.run(progress, split_images=loaded.split_images, max_images=images,
                                           features=features, shard=self.shard)
        finally:
            if features is not None:
                features.close()
        timings = validation.timings
        assert timings is not None
        loss = validation.loss
        how = OFF if features is None else features.result(timings.images_reused)
        costs = {"features": how, "images_reused": timings.images_reused,
                 "images_computed": timings.images_computed, "encoder": digest[:16],
                 "seconds": {"features": timings.features, "decoder": timings.decoder}}
        if features is not None and features.full_disk:
            costs["not_kept"] = features.full_disk
        # another vocabulary: say how much of it the model lacks
        unknown = loss.unknown_words if validator.id_map is not None else None
        if self.shard is not None:  # a part: scored once every part is in (``merge``)
            ids = list(validation.image_losses)
            part = SetPart(loaded.spec.name, self.shard, ids, [validation.captions[i] for i in ids],
                           [validation.image_losses[i][0] for i in ids],
                           [validation.image_losses[i][1] for i in ids], loss.examples, unknown,
                           time.monotonic() - started, costs,
                           set_fingerprint(ids, loaded.images, loaded.references, loaded.spec.name))
            return EvalResult(step=step, checkpoint=path, metrics={}, examples=loss.examples,
                              seconds=part.seconds, train_seconds=seconds, eval_set=loaded.spec.name,
                              costs=costs, part=part)
        return self._scored(loaded, list(validation.image_losses), validation.captions,
                            validation.image_losses, loss.loss, loss.examples, unknown, path, step, seconds,
                            started, costs)

    def merge(self, parts: Sequence[SetPart], path: str, step: int,
              train_seconds: float | None) -> EvalResult:
        """The evaluation the parts of every set make (each set's N parts in ``parts``), scored as one
        evaluator scores its own: the default set's result, the others' in ``others``.  Raises
        ``PartsMismatch`` unless they are each set's parts once each."""
        started = time.monotonic()
        self.open()
        results = []
        for loaded in self.sets:
            merging = time.monotonic()
            merged = merge_parts([p for p in parts if p.eval_set == loaded.spec.name], loaded.order,
                                 lambda ids, loaded=loaded: self._fingerprint(ids, loaded))
            merged.costs["seconds"]["merge"] = time.monotonic() - merging  # the interleave (not scoring)
            results.append(self._scored(loaded, merged.image_ids, merged.captions, merged.image_losses,
                                        merged.loss, merged.examples, merged.unknown_words, path, step,
                                        train_seconds, started, merged.costs, parts_seconds=merged.seconds))
        main, *others = results
        main.others = others
        return main

    def set_fingerprints(self) -> dict[str, str]:
        """Each set's fingerprint of the images one evaluator evaluates (``set_fingerprint``): what
        every part of a split must have read (``plan.json``), whatever the data's path."""
        return {loaded.spec.name: set_fingerprint(loaded.order, loaded.images, loaded.references,
                                                  loaded.spec.name) for loaded in self.sets}

    @staticmethod
    def _fingerprint(ids: Sequence[int], loaded: _Loaded) -> str:
        """This evaluator's fingerprint of a part's ``ids`` (an id the set lacks: refused)."""
        try:
            return set_fingerprint(ids, loaded.images, loaded.references, loaded.spec.name)
        except ShowtellError as exc:
            raise PartsMismatch(str(exc)) from exc

    def _scored(self, loaded: _Loaded, image_ids: list[int], captions: Mapping[int, str],
                image_losses: Mapping[int, tuple[float, float]], loss: float, examples: int,
                unknown_words: int | None, path: str, step: int, seconds: float | None, started: float,
                costs: dict, parts_seconds: float = 0.0) -> EvalResult:
        """One set's result from what its images gave: every metric, its interval, the samples."""
        scoring_started = time.monotonic()
        inputs = Inputs(
            image_ids=image_ids, captions=captions, references=loaded.references,
            image_losses=image_losses, loss=loss,
            unknown_words=float(unknown_words) if unknown_words is not None else None,
            unknown_references=frozenset(loaded.unknown_references))
        if self.scorer is not None:
            self.scorer.prepare(inputs)
        metrics, stats = score(inputs)
        stats = replace(stats, fingerprint=set_fingerprint(stats.image_ids, loaded.images, loaded.references,
                                                           loaded.spec.name))
        intervals_started = time.monotonic()
        intervals = bootstrap.intervals(stats, self.bootstrap) if len(stats) else {}
        costs["seconds"] = {**costs["seconds"], "scoring": intervals_started - scoring_started,
                            "intervals": time.monotonic() - intervals_started}
        shown = [{"image_id": i, "caption": captions[i], "references": loaded.references.get(i, [])}
                 for i in image_ids[: self.samples]]
        return EvalResult(step=step, checkpoint=path, metrics=metrics, examples=examples,
                          seconds=parts_seconds + time.monotonic() - started, samples=shown,
                          scoring=self.scorer.scoring if self.scorer is not None else "",
                          train_seconds=seconds, intervals=intervals,
                          bootstrap=self.bootstrap.as_dict() if intervals else {}, stats=stats,
                          eval_set=loaded.spec.name, costs=costs)


def set_fingerprint(image_ids: Iterable[int], images: Mapping[int, bytes],
                    references: Mapping[int, Sequence[str]], eval_set: str = DEFAULT_SET) -> str:
    """What an evaluation was of: sha256 over its images in id order — each id, its encoded
    image's fingerprint and its references' text.  Equal ids are not enough: two synthetic sets
    of other seeds both number their scenes from 0.  An id the set does not hold is refused (one
    line): its bytes cannot be fingerprinted, and hashing nothing for it would name another set."""
    ids = sorted(int(i) for i in image_ids)
    missing = [i for i in ids if i not in images]
    if missing:
        raise ShowtellError(f"set {eval_set}: image {missing[0]}" + (f" and {len(missing) - 1} more"
                            if len(missing) > 1 else "") + " evaluated but not among the set's records: "
                            "the evaluation is not of this set (a part of another one?)")
    digest = hashlib.sha256()
    for image_id in ids:
        digest.update(image_id.to_bytes(8, "little", signed=True) + images[image_id])
        digest.update("\x1f".join(references.get(image_id, ())).encode() + b"\x1e")
    return digest.hexdigest()
