"""Which broker images a RocketStore may run: the operator's allow-list.

Whoever may create a RocketStore in a namespace would otherwise choose the image that runs with
that namespace's TLS and ACL Secrets mounted: the operator, which may create those pods, would be
a confused deputy. So the operator runs only its default broker image (``--broker-image``, else its
own release) and the images its administrator allows by pattern; a RocketStore naming another image
is refused with a status condition and nothing of it is created or changed.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ALLOWED_IMAGES_ENV", "ImagePolicy"]

#: the allow-list when ``--allowed-broker-images`` is not given (the chart sets the flag)
ALLOWED_IMAGES_ENV = "ROCKETSTORE_ALLOWED_BROKER_IMAGES"


@dataclass(frozen=True)
class ImagePolicy:
    """The default broker image, always allowed, and shell-style patterns (``fnmatch``, case-sensitive;
    ``*`` also matches ``/``) that allow others. ``*`` alone allows every image."""

    default_image: str
    patterns: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, default_image: str, text: str | None, environ: Mapping[str, str]) -> ImagePolicy:
        """From ``--allowed-broker-images`` (comma- or space-separated), else the environment."""
        raw = text if text is not None else environ.get(ALLOWED_IMAGES_ENV, "")
        return cls(default_image, tuple(p for p in raw.replace(",", " ").split() if p))

    def refusal(self, image: str | None) -> str | None:
        """None when ``image`` (a RocketStore's spec.image; None: the default) may run, else why not."""
        if image is None or image == self.default_image:
            return None
        if any(fnmatch.fnmatchcase(image, pattern) for pattern in self.patterns):
            return None
        allowed = ", ".join([self.default_image, *self.patterns])
        return (f"spec.image {image!r} is not an allowed broker image (allowed: {allowed}); the operator's "
                f"administrator allows images with --allowed-broker-images (chart value allowedBrokerImages)")

    def __str__(self) -> str:
        return ", ".join([self.default_image, *self.patterns])
