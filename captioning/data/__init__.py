"""Datasets: builders (synthetic scenes, MSCOCO), the record schema, vocabulary, ``tf.data``
pipelines and the phase-1 feature cache."""
