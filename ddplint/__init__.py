"""ddplint: find distributed-training mistakes in PyTorch scripts before the multi-GPU run."""

__version__ = "0.1.0"
