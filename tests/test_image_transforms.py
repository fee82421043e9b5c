"""The papers' train / eval image transforms (thesis Sec. 3.3.2.1) against direct definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from dmlkit.data.transforms.image_crops import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    EvalTransform,
    PaperTransformConfig,
    TrainTransform,
    center_crop_box,
    random_resized_crop_box,
    resized_shape,
)
from dmlkit.data.seeding import make_generator


def smooth_image(width=500, height=375):
    """A smooth colour gradient, so that resampling differences stay small."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    array = np.stack([255 * x / width, 255 * y / height, 128 + 60 * np.sin(x / 40.0)], -1)
    return Image.fromarray(array.round().astype(np.uint8))


def normalize(array_uint8):
    x = torch.from_numpy(np.asarray(array_uint8, dtype=np.float32) / 255.0).permute(2, 0, 1)
    return (x - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(IMAGENET_STD).view(3, 1, 1)


def test_resized_shape_keeps_aspect_and_sets_shorter_side():
    assert resized_shape(500, 375, 256) == (341, 256)
    assert resized_shape(375, 500, 256) == (256, 341)
    assert resized_shape(300, 300, 256) == (256, 256)


@pytest.mark.parametrize("width,height", [(341, 256), (256, 400), (256, 256)])
def test_random_crop_boxes_respect_scale_ratio_and_bounds(width, height):
    scale, ratio = (0.16, 1.0), (3 / 4, 4 / 3)
    for s in range(300):
        left, top, w, h = random_resized_crop_box(width, height, scale, ratio, make_generator(7, s))
        assert 0 <= left and 0 <= top and left + w <= width and top + h <= height
        # rounding of w and h moves area and ratio by at most ~1 pixel per side
        assert scale[0] * width * height - (w + h) - 1 <= w * h <= width * height
        assert ratio[0] - 2 / min(w, h) <= w / h <= ratio[1] + 2 / min(w, h)


def test_random_crop_areas_cover_the_scale_range():
    areas = [
        (lambda b: b[2] * b[3] / (341 * 256))(
            random_resized_crop_box(341, 256, (0.16, 1.0), (3 / 4, 4 / 3), make_generator(1, s))
        )
        for s in range(400)
    ]
    assert min(areas) < 0.25 and max(areas) > 0.85  # the whole range is used, not a fixed crop


def test_random_crop_falls_back_to_the_largest_centred_box():
    # ratio 4..5 never fits a square image's attempts with scale 1: fall back to width x width/4, centred
    left, top, w, h = random_resized_crop_box(100, 100, (1.0, 1.0), (4.0, 5.0), make_generator(0))
    assert (w, h) == (100, 25) and (left, top) == (0, 37)


def test_center_crop_box():
    assert center_crop_box(341, 256, 227) == (57, 14, 227, 227)


def test_eval_transform_equals_resize_then_center_crop():
    img = smooth_image()
    out = EvalTransform()(img)
    assert out.shape == (3, 227, 227)
    resized = img.resize(resized_shape(500, 375, 256), Image.Resampling.BILINEAR)
    left, top, w, h = center_crop_box(resized.width, resized.height, 227)
    expected = normalize(resized.crop((left, top, left + w, top + h)))
    # one resampling instead of two: equal up to interpolation rounding (values in std units)
    assert float((out - expected).abs().mean()) < 0.02 and float((out - expected).abs().max()) < 0.2


def test_train_transform_equals_resize_crop_resize_flip():
    img = smooth_image()
    t = TrainTransform(PaperTransformConfig(flip_prob=0.0))
    out = t(img, make_generator(3, 0, 5))
    resized = img.resize(resized_shape(500, 375, 256), Image.Resampling.BILINEAR)
    left, top, w, h = random_resized_crop_box(
        resized.width, resized.height, (0.16, 1.0), (3 / 4, 4 / 3), make_generator(3, 0, 5)
    )
    expected = normalize(resized.crop((left, top, left + w, top + h)).resize((227, 227), Image.Resampling.BILINEAR))
    assert out.shape == (3, 227, 227)
    assert float((out - expected).abs().mean()) < 0.03


def test_train_transform_is_seeded_and_flips():
    img = smooth_image(120, 90)
    cfg = dict(size=32, resize=36)
    a = TrainTransform(PaperTransformConfig(**cfg))(img, make_generator(1, 2, 3))
    b = TrainTransform(PaperTransformConfig(**cfg))(img, make_generator(1, 2, 3))
    assert torch.equal(a, b)
    c = TrainTransform(PaperTransformConfig(**cfg))(img, make_generator(1, 3, 3))
    assert not torch.equal(a, c)
    never = TrainTransform(PaperTransformConfig(flip_prob=0.0, **cfg))(img, make_generator(4))
    always = TrainTransform(PaperTransformConfig(flip_prob=1.0, **cfg))(img, make_generator(4))
    assert torch.equal(always, never.flip(-1))


def test_constant_image_is_normalised_with_imagenet_statistics():
    img = Image.new("RGB", (50, 40), (255, 0, 128))
    out = EvalTransform(PaperTransformConfig(size=16, resize=20))(img)
    expected = (torch.tensor([1.0, 0.0, 128 / 255]) - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    torch.testing.assert_close(out[:, 5, 5], expected, atol=1e-5, rtol=0)
    assert math.isclose(float(out[0].std()), 0.0, abs_tol=1e-5)


@pytest.mark.parametrize(
    "bad",
    [dict(size=0), dict(size=227, resize=200), dict(scale=(0.5, 0.2)), dict(ratio=(0.0, 1.0)), dict(flip_prob=2.0)],
)
def test_bad_configs(bad):
    with pytest.raises(ValueError):
        PaperTransformConfig(**bad)
