"""The pod template the kubeforge resources embed: a core/v1 PodTemplateSpec kept as free-form
data, and the checks of the shape of the PodSpec fields the operator reads or merges into."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from ._base import DNS_LABEL_PATTERN, MAX_LABEL_LENGTH, KubeModel

_CONTAINERS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "maxItems": 64,
    "description": "containers of the pod; at least one, each with a name and an image.",
    "items": {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "required": ["image", "name"],
        "description": "A core/v1 Container; see `kubectl explain pod.spec.containers`.",
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_LABEL_LENGTH,
                "pattern": DNS_LABEL_PATTERN,
                "description": "name of the container, a DNS label. The GPUs go to the "
                "container named trainer or pytorch (vllm, sglang, server, model-server or "
                "triton for an InferenceService), else the first.",
            },
            "image": {
                "type": "string",
                "minLength": 1,
                "maxLength": 4096,
                "description": "image of the container, e.g. nvcr.io/nvidia/pytorch:24.05-py3.",
            },
        },
    },
}


class PodTemplate(KubeModel):
    """PodTemplate is a core/v1 PodTemplateSpec, kept as free-form data (its schema is
    Kubernetes' own, checked when the operator creates the pods), except that it must have at
    least one container and every container a name and an image: a pod that could never be
    created is refused up front, not discovered after GPUs were reserved for it."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="metadata holds labels and annotations to put on every pod "
        "(a metav1.ObjectMeta).",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    spec: dict[str, Any] = Field(
        description="spec is the core/v1 PodSpec of every pod: containers (image, command, "
        "args, env, volumeMounts), volumes, serviceAccountName, and so on. The operator adds "
        "GPU requests and limits, node affinity, the pool's tolerations and the volumes it "
        "manages. See `kubectl explain pod.spec`.",
        json_schema_extra={
            "x-kubernetes-preserve-unknown-fields": True,
            "required": ["containers"],
            "properties": {"containers": _CONTAINERS_SCHEMA},
        },
    )

    @field_validator("metadata")
    @classmethod
    def _metadata_shape(cls, md: dict[str, Any]) -> dict[str, Any]:
        for key in ("labels", "annotations"):
            _string_map(md.get(key), f"template.metadata.{key}")
        return md

    @field_validator("spec")
    @classmethod
    def _has_containers(cls, spec: dict[str, Any]) -> dict[str, Any]:
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise ValueError("template.spec.containers must list at least one container")
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name") or not isinstance(c.get("name"), str):
                raise ValueError(f"template.spec.containers[{i}] needs a name")
            if not c.get("image") or not isinstance(c.get("image"), str):
                raise ValueError(f"template.spec.containers[{i}] ({c.get('name')}) needs an image")
        _pod_spec_shape(spec)
        return spec


def _string_map(value: Any, where: str) -> None:
    if value is not None and (not isinstance(value, dict)
                              or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
        raise ValueError(f"{where} must be a map of strings to strings")


def _list_of_objects(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise ValueError(f"{where} must be a list of objects")
    return value


def _pod_spec_shape(spec: dict[str, Any]) -> None:
    """The shape of the PodSpec fields the operator reads or merges into (node selection,
    tolerations, volumes, each container's env and resources), so that a template the API
    server would refuse as a Pod is reported as InvalidSpec before any GPU is held, and never
    reaches placement or the builders as a string where a map is expected."""
    if spec.get("nodeName"):
        raise ValueError("template.spec.nodeName must be empty: the operator places every pod "
                         "(it pins each rank to the node admission chose)")
    _string_map(spec.get("nodeSelector"), "template.spec.nodeSelector")
    aff = spec.get("affinity")
    if aff is not None:
        if not isinstance(aff, dict) or not all(isinstance(v, dict) for v in aff.values()):
            raise ValueError("template.spec.affinity must be an object (a core/v1 Affinity)")
        req = (aff.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        if req is not None:
            if not isinstance(req, dict):
                raise ValueError("template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution "
                                 "must be an object")
            _list_of_objects(req.get("nodeSelectorTerms"), "template.spec.affinity.nodeAffinity."
                             "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms")
    _list_of_objects(spec.get("tolerations"), "template.spec.tolerations")
    for i, v in enumerate(_list_of_objects(spec.get("volumes"), "template.spec.volumes")):
        name = v.get("name")
        if not isinstance(name, str) or not re.match(DNS_LABEL_PATTERN, name) or len(name) > MAX_LABEL_LENGTH:
            raise ValueError(f"template.spec.volumes[{i}].name {name!r} must be a DNS label "
                             "(lower case letters, digits and '-')")
    for kind in ("containers", "initContainers"):
        for i, c in enumerate(_list_of_objects(spec.get(kind), f"template.spec.{kind}")):
            where = f"template.spec.{kind}[{i}]"
            for e in _list_of_objects(c.get("env"), f"{where}.env"):
                if not isinstance(e.get("name"), str) or not e["name"]:
                    raise ValueError(f"{where}.env: every entry needs a name")
            res = c.get("resources")
            if res is not None:
                if not isinstance(res, dict):
                    raise ValueError(f"{where}.resources must be an object (requests, limits)")
                for key in ("requests", "limits"):
                    if res.get(key) is not None and not isinstance(res[key], dict):
                        raise ValueError(f"{where}.resources.{key} must be a map of resource names to quantities")
            _list_of_objects(c.get("volumeMounts"), f"{where}.volumeMounts")
