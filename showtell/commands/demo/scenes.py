"""The demo's scenes: the synthetic dataset, the unseen scenes of another seed (its second
evaluation set), and a few validation scenes as PNG files for ``showtell caption``."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from showtell.commands.demo.console import Console
from showtell.commands.demo.settings import UNSEEN, UNSEEN_SEED
from showtell.common import processes


def build_data(console: Console, data: Path, train_images: int, log_path: Path) -> int:
    started = time.monotonic()
    with open(log_path, "a") as log_file:
        built = subprocess.run(processes.command("data", "synthetic", "--out", str(data), "--train",
                                                 str(train_images)),
                               stdout=log_file, stderr=subprocess.STDOUT, env=processes.environment())
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    if built.returncode:
        console.say("data", lines[-1] if lines else f"showtell data exited {built.returncode}")
        return built.returncode
    console.say("data", f"{data}: {train_images} synthetic training scenes ready "
                        f"({time.monotonic() - started:.0f} s; log {log_path})")
    return 0


# The training scenes the unseen set's vocabulary is counted from.  4 lacked five of the grammar's
# words ("yellow", "left", ",", "from", "to"): 64 of 100 references held <UNK>, and no model could
# score above exact match 0.36 on the set — a generalisation gap that was an artefact.
UNSEEN_TRAIN = 400


def build_unseen(console: Console, data: Path, images: int, log_path: Path, trained_on: Path) -> int:
    """Validation scenes drawn with ``UNSEEN_SEED``: the second evaluation set ("does it generalise"),
    kept across demos — unless its vocabulary lacks words of ``trained_on``'s (a set built by an
    older demo), which would turn its references' words into <UNK>."""
    from showtell.captioning.data.vocab import VOCAB, Vocabulary

    if (data / VOCAB).exists() and (set(Vocabulary.load(trained_on / VOCAB).words)
                                    - set(Vocabulary.load(data / VOCAB).words)):
        console.say("data", f"{data}: its vocabulary lacks words of the training data's: built again")
        shutil.rmtree(data)
    with open(log_path, "a") as log_file:
        built = subprocess.run(processes.command("data", "synthetic", "--out", str(data), "--train",
                                                 str(UNSEEN_TRAIN),
                                                 "--train-shards", "1", "--val", str(images), "--seed",
                                                 str(UNSEEN_SEED), "--if-missing"),
                               stdout=log_file, stderr=subprocess.STDOUT, env=processes.environment())
    if built.returncode:
        console.say("data", f"the unseen scenes: showtell data exited {built.returncode} (log {log_path})")
        return built.returncode
    console.say("data", f"{data}: {images} validation scenes of seed {UNSEEN_SEED}, never trained on, "
                        f"evaluated as the set {UNSEEN!r} beside the validation split")
    return 0


PICTURES = 6


def write_pictures(out: Path, seed: int, image_size: int) -> list[Path]:
    """A few validation scenes as PNG files, for ``showtell caption`` after the demo (pictures
    no phase trained on), each named with its first reference caption."""
    from PIL import Image

    from showtell.captioning.data import synthetic

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for index in range(PICTURES):
        scene = synthetic.make_scene(seed, "val", index, image_size)
        path = out / f"val-{index}-{synthetic.captions(scene)[0].replace(' , ', ' ').replace(' ', '-')}.png"
        if not path.exists():
            Image.fromarray(synthetic.draw(scene, image_size)).save(path)
        written.append(path)
    return written
