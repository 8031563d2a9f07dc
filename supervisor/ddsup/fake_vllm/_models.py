"""The model names a lane answers to: served names (aliases) and LoRA adapters.

As vLLM 0.34's ``OpenAIServingModels``: the base model is served under each
``--served-model-name`` (default: the model itself); a request may name any of them, or
a LoRA adapter of ``--lora-modules``, or no model at all (the base model). Answers carry
the first served name for the base model, whatever alias was asked for, and the
adapter's name for an adapter. ``/v1/models`` lists one card per served name (``root``
is the model path) and one per adapter (``root`` its path, ``parent`` its base model).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ddsup._json import Json, JsonObject
from ddsup.fake_vllm._behaviour import Behaviour
from ddsup.fake_vllm._request import RequestError


@dataclass(frozen=True)
class ServedModels:
    """The lane's names; :meth:`resolve` turns a request's ``model`` into the answer's."""

    model_path: str
    names: tuple[str, ...]
    adapters: dict[str, tuple[str, str]]  # name → (path, parent)
    max_model_len: int

    @classmethod
    def of(cls, behaviour: Behaviour) -> ServedModels:
        names = behaviour.served_names()
        adapters = {
            lora.name: (lora.path, lora.base_model_name or names[0])
            for lora in behaviour.lora_modules
        }
        return cls(behaviour.model, names, adapters, behaviour.max_model_len)

    @property
    def primary(self) -> str:
        """The base model's name in answers and metrics labels."""
        return self.names[0]

    def resolve(self, requested: object) -> str:
        """The ``model`` of the answer to a request that asked for ``requested``."""
        if requested is None or requested in self.names:
            return self.primary
        if isinstance(requested, str) and requested in self.adapters:
            return requested
        if not isinstance(requested, str):
            raise RequestError("`model` must be a string.", param="model")
        raise RequestError(
            f"The model `{requested}` does not exist.",
            status=404,
            err_type="NotFoundError",
            param="model",
        )

    def model_list(self, created: int) -> JsonObject:
        """The body of ``GET /v1/models``: vLLM's ``ModelList``."""
        cards: list[Json] = [
            _card(name, created, root=self.model_path, max_model_len=self.max_model_len)
            for name in self.names
        ]
        cards += [
            _card(name, created, root=path, parent=parent)
            for name, (path, parent) in self.adapters.items()
        ]
        return {"object": "list", "data": cards}


def _card(
    name: str,
    created: int,
    *,
    root: str,
    parent: str | None = None,
    max_model_len: int | None = None,
) -> JsonObject:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": root,
        "parent": parent,
        "max_model_len": max_model_len,
        "permission": [_permission(created)],
    }


def _permission(created: int) -> JsonObject:
    """vLLM's default ``ModelPermission``: what its model cards carry."""
    return {
        "id": f"modelperm-{uuid.uuid4().hex}",
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
