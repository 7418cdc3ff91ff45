"""Images in a request, checked before anything is stored: a `data:` URL must hold a real image
of a format the model servers decode (PNG, JPEG, WEBP, GIF that is not animated), within the size
and pixel limits; else a 400 naming where it is."""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections.abc import Iterator

from PIL import Image, UnidentifiedImageError

from app import errors
from app.protocol.shapes import Item, content_parts

FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_PIXELS = 40_000_000  # 8,000 x 5,000; model servers scale images down far below this anyway


def image_parts(items: list[Item]) -> Iterator[tuple[Item, str]]:
    """Every input_image part of these items (in messages and tool outputs), with its parameter."""
    for part, where in content_parts(items, "input_image"):
        yield part, f"{where}.image_url"


def check_data_url(url: str, param: str) -> None:
    """A 400 unless the data: URL holds one supported image within the limits."""
    _, separator, data = url.partition(",")
    if not separator or not url[: len(url) - len(data)].endswith(";base64,"):
        raise errors.InvalidRequest(
            f"Invalid '{param}': expected a data URL of the form data:image/<type>;base64,<data>.",
            param=param,
            code="invalid_base64_image",
        )
    if len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise _invalid_image(param, f"the image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise errors.InvalidRequest(
            f"Invalid '{param}': the image data is not valid base64.", param=param, code="invalid_base64_image"
        ) from None
    check_image(raw, param)


def check_image(raw: bytes, param: str) -> str:
    """The image's media type; a 400 unless it is one supported image within the limits."""
    if len(raw) > MAX_IMAGE_BYTES:
        raise _invalid_image(param, f"the image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as image:
                kind, (width, height) = image.format, image.size
                frames = getattr(image, "n_frames", 1)
                if width * height > MAX_PIXELS:
                    raise _invalid_image(param, f"the image has {width}x{height} pixels, more than {MAX_PIXELS:,}")
                image.verify()  # reads the whole file: truncated or corrupt data fails here
    except errors.InvalidRequest:
        raise
    except (UnidentifiedImageError, Image.DecompressionBombWarning, Image.DecompressionBombError, OSError, ValueError):
        raise _invalid_image(param, "the data is not an image this server can read") from None
    if kind not in FORMATS:
        raise _invalid_image(param, f"{kind} images are not supported; send PNG, JPEG, WEBP or GIF")
    if frames > 1:
        raise _invalid_image(param, "animated images are not supported")
    return FORMATS[kind]


def data_url(raw: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


def _invalid_image(param: str, why: str) -> errors.InvalidRequest:
    return errors.InvalidRequest(f"Invalid '{param}': {why}.", param=param, code="invalid_image")
