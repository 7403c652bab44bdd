"""KLineage: verified GPU-optimization skills mined from expert CUDA kernel lineages."""

__version__ = "0.1.0"
