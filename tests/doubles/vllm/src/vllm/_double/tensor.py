"""Tensors of the test double: a shape, a dtype and a device, nothing else (the double computes nothing). Enough for
the stand-in modules to pass arguments shaped like vLLM's and to check them (`ndim`, `squeeze`, `unsqueeze`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str = "bfloat16"
    device: str = "cuda:0"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def squeeze(self, dim: int) -> Tensor:
        at = dim % self.ndim
        if self.shape[at] != 1:
            return self
        return Tensor(self.shape[:at] + self.shape[at + 1 :], self.dtype, self.device)

    def unsqueeze(self, dim: int) -> Tensor:
        at = dim if dim >= 0 else self.ndim + 1 + dim
        return Tensor((*self.shape[:at], 1, *self.shape[at:]), self.dtype, self.device)

    def __getitem__(self, item: slice | int | tuple[slice | int, ...]) -> Tensor:
        """Basic indexing: a slice keeps its dimension (with the sliced length), an integer drops it."""
        items = item if isinstance(item, tuple) else (item,)
        shape: list[int] = []
        for dim, index in enumerate(items):
            if isinstance(index, slice):
                shape.append(len(range(*index.indices(self.shape[dim]))))
        return Tensor((*shape, *self.shape[len(items) :]), self.dtype, self.device)


def empty(*shape: int, dtype: str = "bfloat16", device: str = "cuda:0") -> Tensor:
    return Tensor(tuple(shape), dtype, device)
