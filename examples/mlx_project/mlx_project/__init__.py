"""mlx_project: a small MLX package with a custom Metal kernel (a row softmax)."""

from mlx_project.softmax import softmax

__all__ = ["softmax"]
