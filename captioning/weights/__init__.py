"""Pretrained encoder weights: Keras ``.h5`` files, TF-slim checkpoints, ``imagenet``."""
