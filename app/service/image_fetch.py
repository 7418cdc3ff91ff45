"""Images in a request, checked before anything is stored; one given by URL is fetched here
(app/process/url_fetch.py) and goes on, and is stored, as the data: URL the model sees, checked
as the client's own would be."""

from __future__ import annotations

import asyncio

from app import errors
from app.process.url_fetch import UrlFetcher, refused
from app.protocol.images import MAX_IMAGE_BYTES, check_data_url, check_image, data_url, image_parts
from app.protocol.shapes import Item


async def fetch_image(fetcher: UrlFetcher, url: str, param: str) -> str:
    """The image at `url` as a data: URL; a 400 naming `param` for anything else."""
    fetched = await fetcher.fetch(url, param, what="image", accept="image/*", limit=MAX_IMAGE_BYTES)
    if not fetched.media_type.startswith("image/"):
        raise refused(param, url, "image", f"it is {fetched.media_type or 'of no content type'}, not an image")
    return data_url(fetched.body, check_image(fetched.body, param))


async def check_images(items: list[Item], fetcher: UrlFetcher | None) -> None:
    """Every image is checked before anything is stored; one given by URL is fetched here and
    goes on (and is stored) as the data: URL the model sees."""
    fetches = []
    for part, param in image_parts(items):
        url = part["image_url"]
        if url.startswith("data:"):
            check_data_url(url, param)
        elif fetcher is None:
            raise errors.InvalidRequest(
                f"Invalid '{param}': this server does not fetch image URLs; send the image as a data: URL.",
                param=param,
                code="unsupported_value",
            )
        else:
            fetches.append((part, fetch_image(fetcher, url, param)))
    if fetches:
        fetched = await asyncio.gather(*(fetch for _, fetch in fetches))
        for (part, _), url in zip(fetches, fetched, strict=True):
            part["image_url"] = url
