"""Embed a dataset with a model, in evaluation mode and without gradients."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


@torch.no_grad()
def embed_dataset(
    model: nn.Module, dataset: Dataset, batch_size: int = 256, device: torch.device | str = "cpu", num_workers: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(embeddings, labels)`` of the whole ``dataset`` as float32 CPU tensors, in dataset order."""
    was_training = model.training
    model.eval()
    on_gpu = torch.device(device).type == "cuda"
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, pin_memory=on_gpu)
    chunks, labels = [], []
    try:
        for images, batch_labels in loader:
            chunks.append(model(images.to(device, non_blocking=on_gpu)).float().cpu())
            labels.append(batch_labels)
    finally:
        model.train(was_training)
    if not chunks:
        raise ValueError("cannot embed an empty dataset; check the dataset's root folder and split")
    return torch.cat(chunks), torch.cat(labels)
