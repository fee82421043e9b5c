"""Shared settings of the tests: a tiny training run on a few glyph classes."""

TINY_OVERRIDES = [
    "data.max_classes=24",
    "data.val_fraction=0.25",
    "model.embedding_dim=16",
    "train.batch_size=16",
    "train.m_per_class=4",
    "train.max_steps=8",
    "train.val_every=4",
    "train.log_every=2",
    "eval.batch_size=128",
]


def fake_train_set(labels, in_channels=1):
    """The three facts of a training split that ``dmlkit.assemble.build_model`` reads, without images."""
    from types import SimpleNamespace

    return SimpleNamespace(labels=labels, num_classes=int(labels.max()) + 1, in_channels=in_channels)


def torchrun(args, env_extra=None, timeout=300):
    """``python -m torch.distributed.run --standalone --nproc_per_node=2 -m dmlkit ARGS`` with one intra-op thread
    per process, captured (``subprocess.CompletedProcess``)."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "dmlkit", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def stop_after_validation(step):
    """A trainer callback that simulates a crash right after the validation (and checkpoint) at ``step``."""
    from dmlkit.engine.callbacks import Callback

    class StopAfterValidation(Callback):
        def on_validation_end(self, trainer, metrics):
            if trainer.state.step == step:
                raise KeyboardInterrupt

    return StopAfterValidation()
