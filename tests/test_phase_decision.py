"""The phase decision as a table: the flags and the model dir's record of its encoder's start →
whether the encoder trains, whether phase 1 reads the feature cache, the encoder's optimizer and
why, in words.  Pure (``trainer.transfer.decide_phase``), so in process and without a model."""

from __future__ import annotations

import pytest

from showtell.trainer.config import IM2TXT_INCEPTION_LEARNING_RATE, OptimizerConfig
from showtell.trainer.step.transfer import decide_phase

SGD = OptimizerConfig()  # im2txt: 2.0, halved every 8 epochs
OWN_RATE = OptimizerConfig(inception_learning_rate=0.01)
PRETRAINED = {"kind": "keras-h5", "path": "/w/inception.h5"}  # what a model dir records
SCRATCH = {"kind": "none"}

# flag, weights, recorded, cache, optimizer → trains, uses cache, encoder rate (None: no own
# optimizer; "decoder's": the decoder's schedule), the reason's start
CASES = [
    ("new dir, pretrained weights: phase 1 on the cache",
     None, "/w/inception.h5", None, True, SGD, False, True, None, "pretrained encoder, phase 1"),
    ("new dir, pretrained weights, cache off: phase 1 on images",
     None, "/w/inception.h5", None, False, SGD, False, False, None, "pretrained encoder, phase 1"),
    ("new dir, no weights: the encoder trains from scratch on the decoder's schedule",
     None, "none", None, True, SGD, True, False, "decoder's", "encoder trained from scratch"),
    ("new dir, no weights, an encoder rate given: its own constant rate",
     None, "none", None, True, OWN_RATE, True, False, 0.01, "encoder trained from scratch"),
    ("phase 2 asked on a pretrained dir: im2txt's encoder rate",
     True, "none", PRETRAINED, True, SGD, True, False, IM2TXT_INCEPTION_LEARNING_RATE,
     "--train-inception true"),
    ("phase 2 with an encoder rate of its own",
     True, "none", PRETRAINED, True, OWN_RATE, True, False, 0.01, "--train-inception true"),
    ("a pretrained dir resumed without flags stays in phase 1 (the weights flag no longer applies)",
     None, "none", PRETRAINED, True, SGD, False, True, None, "pretrained encoder, phase 1"),
    ("a scratch dir resumed with a weights flag still trains its encoder (the record wins)",
     None, "/w/inception.h5", SCRATCH, True, SGD, True, False, "decoder's", "encoder trained from scratch"),
    ("frozen on request, even from scratch: on the cache",
     False, "none", None, True, SGD, False, True, None, "--train-inception false"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_phase_follows_the_flags_and_the_model_dirs_record(case):
    _, flag, weights, recorded, cache, optimizer, trains, uses_cache, rate, why = case
    phase = decide_phase(train_inception=flag, inception_weights=weights, recorded_init=recorded,
                         cache_enabled=cache, optimizer=optimizer)
    assert (phase.trains_encoder, phase.uses_cache) == (trains, uses_cache)
    assert phase.why.startswith(why)
    if rate is None:
        assert phase.encoder_optimizer is None and "encoder learning rate" not in phase.describe()
    elif rate == "decoder's":
        assert phase.encoder_optimizer == optimizer
    else:
        own = phase.encoder_optimizer
        assert (own.learning_rate, own.epochs_per_decay) == (rate, 0.0)
        assert f"encoder learning rate {rate:g}" in phase.describe()
    assert phase.describe().startswith(f"encoder {'trains' if trains else 'frozen'}: {why}")
