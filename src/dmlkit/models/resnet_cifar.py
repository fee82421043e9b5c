"""CIFAR-style ResNets (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016, Sec. 4.2).

The network of Sec. 4.2 for 32x32 inputs: a 3x3 convolution with 16 filters,
then three stages of ``n`` basic blocks each (two 3x3 convolutions, BN, ReLU)
with 16, 32 and 64 filters on feature maps of 32x32, 16x16 and 8x8; the first
block of stages 2 and 3 subsamples with stride 2.  Depth = 6n + 2, so n = 3, 5,
7, 9 give ResNet-20, -32, -44, -56 (0.27M, 0.46M, 0.66M, 0.85M parameters with
the 10-way classifier of the paper).

Here the network stops before the global average pooling and the classifier:
``forward`` returns the local feature map ``(B, 64, h/4, w/4)`` (``(B, 64, 8, 8)``
for 32x32 inputs), because in dmlkit pooling and the embedding head are separate,
swappable parts (see ``dmlkit.models.embedder``).

Shortcuts when the shape changes (stage 2 and 3 entry):

* ``shortcut="A"`` (default, what Sec. 4.2 uses: "we use identity shortcuts in
  all cases (i.e., option A)"): the input is subsampled with stride 2 and the
  new channels are zero-padded; it has no parameters, so ResNet-20 has exactly
  the paper's parameter count.
* ``shortcut="B"``: a 1x1 convolution with stride 2 followed by BN (projection
  shortcut, option B of Sec. 3.3); adds parameters.

All other shortcuts are identities.  Weights are initialised as in He et al.
(2015, "Delving deep into rectifiers"): Kaiming-normal (fan-out) for convolutions,
BN scale 1 and shift 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["BasicBlock", "CifarResNet", "resnet20", "resnet32", "resnet44", "resnet56"]

SHORTCUTS = ("A", "B")


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)


class _PadShortcut(nn.Module):
    """Option A: subsample by ``stride`` and zero-pad the extra channels (no parameters)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        if out_channels < in_channels:
            raise ValueError("option-A shortcuts can only add channels")
        self.stride = stride
        self.extra = out_channels - in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        if self.extra:
            # Pad the channel dimension (third-to-last) at its end: (w_left, w_right, h_top, h_bottom, c_front, c_back).
            x = F.pad(x, (0, 0, 0, 0, 0, self.extra))
        return x


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with a residual connection: ``relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))``."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, shortcut: str = "A") -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = _conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        if stride == 1 and in_channels == out_channels:
            self.shortcut: nn.Module = nn.Identity()
        elif shortcut == "A":
            self.shortcut = _PadShortcut(in_channels, out_channels, stride)
        else:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet-(6n+2) of He et al. (2016) Sec. 4.2, returning the last local feature map.

    Args:
        depth: 6n + 2 (20, 32, 44, 56, 110, ...).
        in_channels: 3 for RGB images, 1 for grey glyphs.
        shortcut: "A" (zero-padding identity, the paper's CIFAR choice) or "B" (1x1 projection).
        width: filters of the first stage (16 in the paper); stages use width, 2*width, 4*width.

    Attributes:
        out_channels: channels of the returned map (4 * width = 64 by default).
    """

    def __init__(self, depth: int = 20, in_channels: int = 3, shortcut: str = "A", width: int = 16) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6 != 0:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2 with n >= 1 (20, 32, 44, 56, 110), got {depth}")
        if shortcut not in SHORTCUTS:
            raise ValueError(f"shortcut must be one of {SHORTCUTS}, got {shortcut!r}")
        if in_channels < 1 or width < 1:
            raise ValueError("in_channels and width must be positive")
        n = (depth - 2) // 6
        self.depth = depth
        self.blocks_per_stage = n
        self.out_channels = 4 * width

        self.conv1 = _conv3x3(in_channels, width)
        self.bn1 = nn.BatchNorm2d(width)
        stages = []
        channels = width
        for i, stage_width in enumerate((width, 2 * width, 4 * width)):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(BasicBlock(channels, stage_width, stride, shortcut))
                channels = stage_width
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, in_channels, H, W)`` -> local feature map ``(B, out_channels, ceil(H/4), ceil(W/4))``."""
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        x = self.layer2(x)
        return self.layer3(x)


def resnet20(in_channels: int = 3, shortcut: str = "A") -> CifarResNet:
    """ResNet-20 (n = 3), 0.27M parameters in the paper's 10-class version."""
    return CifarResNet(20, in_channels, shortcut)


def resnet32(in_channels: int = 3, shortcut: str = "A") -> CifarResNet:
    """ResNet-32 (n = 5)."""
    return CifarResNet(32, in_channels, shortcut)


def resnet44(in_channels: int = 3, shortcut: str = "A") -> CifarResNet:
    """ResNet-44 (n = 7)."""
    return CifarResNet(44, in_channels, shortcut)


def resnet56(in_channels: int = 3, shortcut: str = "A") -> CifarResNet:
    """ResNet-56 (n = 9)."""
    return CifarResNet(56, in_channels, shortcut)
