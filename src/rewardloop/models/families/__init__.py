"""Model families: one adapter module each behind one interface (:class:`base.ModelFamily`).

Adding a family: a module here with a ``@register_family`` subclass of ModelFamily (or of
:class:`unet.UNetFamily` for a DDPM-style UNet), and its import below. docs/models.md walks
through one.
"""

from rewardloop.models.families.base import (
    EMPTY_PROMPT,
    FAMILIES,
    FamilyError,
    ModelFamily,
    family_names,
    get_family,
    register_family,
)
from rewardloop.models.families import sd15, sdxl, sd3, flux, qwen_image  # noqa: F401  (imported to register)

__all__ = ["EMPTY_PROMPT", "FAMILIES", "FamilyError", "ModelFamily", "family_names", "get_family",
           "register_family"]
