"""The model's weights in a serving pod (issue 29): the volume that holds ``spec.model``, the init
container that waits for the node's copy, and the engine flag that points the server at it. Pure.

============================  =====================================================================
``spec.model.uri``             what the pod gets
============================  =====================================================================
``pvc://CLAIM/PATH``           volume ``kubeforge-model`` (the claim, read-only), mounted read-only at
                               ``model.mountPath`` with subPath ``PATH`` in the main container
``hf s3 gs oci``, pool caches  volume ``kubeforge-model-cache`` (hostPath of the pool's
                               ``modelCache.hostPath``), the init container ``kubeforge-weights``
                               that waits for ``<key>/.kubeforge-ready``, and the main container's
                               read-only mount of subPath ``<key>`` at ``model.mountPath``
``hf s3 gs oci``, no policy    nothing: the template loads its own weights, as without spec.model
============================  =====================================================================

``<key>`` is :func:`kubeforge.modelcache.cache_key` of the model and the service's namespace: the
copy's directory under the hostPath. ``credentialsSecret`` never reaches the pod: the node agent
reads it, the serving containers only read the verified copy.

Why a subPath of the whole cache behind an init container, and not a hostPath volume of
``<hostPath>/<key>`` itself: the node agent downloads into ``.kubeforge/partial/<key>/`` and,
once verified, removes any torn ``<key>/`` and *renames* the partial folder onto it
(:mod:`kubeforge.cacheagent`). A bind mount made before that (volumes are set up before any
container runs, and a hostPath of a missing directory is even created empty) keeps pointing at
the directory that was removed: the server would see an empty folder forever. A subPath is
resolved when its container starts, so the main container, which starts only after the init
container saw the ready marker (written last, after the rename), binds the verified copy.
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

from kubeforge.api import Engine, InferenceServiceSpec, ModelCachePolicy, ModelSource
from kubeforge.modelcache import READY_MARKER, cache_key

MODEL_VOLUME = "kubeforge-model"
"""The volume of a ``pvc://`` model (the claim itself)."""
CACHE_VOLUME = "kubeforge-model-cache"
"""The volume of the node cache (the pool's ``modelCache.hostPath``)."""
WAIT_CONTAINER = "kubeforge-weights"
"""The init container that waits until the node holds the verified copy."""
CACHE_MOUNT = "/kubeforge-cache"
"""Where the init container sees the node cache."""
WAIT_POLL_SECONDS = 2
WAIT_RESOURCES = {"cpu": "10m", "memory": "16Mi"}
"""The waiting shell's requests, and its limits too: a pod is Guaranteed only when every
container, init containers included, has limits equal to its requests, so the waiter keeps a
Guaranteed server Guaranteed."""
VLLM_MODEL_FLAG = "--model"
SGLANG_MODEL_FLAG = "--model-path"
SERVED_NAME_FLAG = "--served-model-name"
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})
ENGINE_FLAGS = {Engine.VLLM: (VLLM_MODEL_FLAG, (VLLM_MODEL_FLAG,)),
                Engine.SGLANG: (SGLANG_MODEL_FLAG, (SGLANG_MODEL_FLAG, VLLM_MODEL_FLAG))}
"""engine -> (the flag added, the flags that mean the command names its model already; SGLang
takes ``--model`` as an alias of ``--model-path``)."""


def pvc_source(uri: str) -> tuple[str, str | None]:
    """The claim and the path inside it of ``pvc://CLAIM/PATH`` (path None when absent)."""
    claim, _, path = uri.split("://", 1)[1].partition("/")
    return claim, path.strip("/") or None


def wait_command(key: str) -> list[str]:
    """The init container's command: poll every 2 s for the copy's ready marker."""
    marker = f"{CACHE_MOUNT}/{key}/{READY_MARKER}"
    return ["/bin/sh", "-c", f"until [ -f {marker} ]; do sleep {WAIT_POLL_SECONDS}; done"]


def _replace(items: Sequence[dict[str, Any]] | None, key: str, value: str) -> list[dict[str, Any]]:
    return [i for i in items or [] if i.get(key) != value]


def _add_volume(pod_spec: dict[str, Any], volume: dict[str, Any]) -> None:
    pod_spec["volumes"] = _replace(pod_spec.get("volumes"), "name", volume["name"]) + [volume]


def _mount(container: dict[str, Any], volume: str, model: ModelSource, sub_path: str | None) -> None:
    """Mount ``volume`` read-only at the model's mountPath (a mount the template had there, or of
    a volume of ours, is replaced: spec.model says what lives at that path)."""
    mounts = [m for m in container.get("volumeMounts") or []
              if m.get("mountPath") != model.mount_path and m.get("name") not in (MODEL_VOLUME, CACHE_VOLUME)]
    mount: dict[str, Any] = {"name": volume, "mountPath": model.mount_path, "readOnly": True}
    if sub_path:
        mount["subPath"] = sub_path
    container["volumeMounts"] = mounts + [mount]


def mount_model(pod_spec: dict[str, Any], main: dict[str, Any], model: ModelSource, namespace: str,
                model_cache: ModelCachePolicy | None) -> bool:
    """Give ``pod_spec``'s ``main`` container ``model``'s weights, read-only at ``model.mountPath``.

    Args:
        pod_spec: The pod's spec (a copy of the template's), changed in place.
        main: The main container of ``pod_spec`` (:func:`kubeforge.objects.set_main_gpus`).
        model: The service's ``spec.model``.
        namespace: The service's namespace (part of the cache key of a model with a Secret).
        model_cache: The pool's ``spec.modelCache``; None when the pool caches nothing.

    Returns:
        Whether the weights are mounted: False only for a cached scheme on a pool without a cache
        policy (the template then loads its own weights, as without spec.model).
    """
    if not model.cached:
        claim, path = pvc_source(model.uri)
        _add_volume(pod_spec, {"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        _mount(main, MODEL_VOLUME, model, path)
        return True
    if model_cache is None:
        return False
    key = cache_key(model, namespace)
    _add_volume(pod_spec, {"name": CACHE_VOLUME, "hostPath": {"path": model_cache.host_path,
                                                             "type": "DirectoryOrCreate"}})
    wait: dict[str, Any] = {
        "name": WAIT_CONTAINER, "image": main["image"], "command": wait_command(key),
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT, "readOnly": True}],
        "resources": {"requests": dict(WAIT_RESOURCES), "limits": dict(WAIT_RESOURCES)},
    }
    if main.get("imagePullPolicy"):
        wait["imagePullPolicy"] = main["imagePullPolicy"]
    pod_spec["initContainers"] = _replace(pod_spec.get("initContainers"), "name", WAIT_CONTAINER) + [wait]
    _mount(main, CACHE_VOLUME, model, key)  # subPath: resolved when main starts, after the marker (module doc)
    return True


def names_flag(words: Sequence[str], flags: Sequence[str]) -> bool:
    """Whether a command's words (a shell script's too) name one of ``flags``, as ``--f x`` or
    ``--f=x``, in the dashed or underscored spelling (``--model`` is not ``--model-path``)."""
    text = " ".join(words)
    for flag in flags:
        for spelling in {flag, flag[:2] + flag[2:].replace("-", "_")}:
            if re.search(rf"(?<![\w-]){re.escape(spelling)}(?![\w-])", text):
                return True
    return False


def _shell_script(words: Sequence[str]) -> bool:
    """Whether the words run a shell script (``sh -c "..."``, ``bash -ec "..."``): not edited, an
    argument after the script would only become its ``$0``."""
    return len(words) > 1 and os.path.basename(words[0]) in SHELLS and words[1].startswith("-") and "c" in words[1]


def _vllm_model_tag(words: Sequence[str]) -> int | None:
    """The index of ``vllm serve``'s positional model tag in ``words``, or None."""
    for i in range(1, len(words) - 1):
        if words[i] == "serve" and os.path.basename(words[i - 1]) == "vllm" and not words[i + 1].startswith("-"):
            return i + 1
    return None


def point_engine(container: dict[str, Any], engine: Engine, path: str) -> None:
    """Point the engine's command in ``container`` at the weights under ``path``, in place.

    Nothing when the engine is ``none``, the command names its model by flag already (vLLM
    ``--model``, SGLang ``--model-path`` or ``--model``) or is a shell script. vLLM's positional
    model tag (``vllm serve NAME``) is replaced by ``path``, with ``--served-model-name NAME`` so
    clients keep asking for NAME: vLLM prefers the positional tag over ``--model`` (its ``serve``
    command sets ``args.model = args.model_tag``), and older releases required the tag. Otherwise
    ``--model path`` (SGLang: ``--model-path path``) is appended to the args, as a single pod's
    ``--enable-sleep-mode`` is; a multi-node group's start script is made from these words.
    """
    if engine not in ENGINE_FLAGS:
        return
    flag, named = ENGINE_FLAGS[engine]
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    words = command + args
    if names_flag(words, named) or _shell_script(words):
        return
    tag = _vllm_model_tag(words) if engine == Engine.VLLM else None
    if tag is None:
        container["args"] = args + [flag, path]
        return
    name, words[tag] = words[tag], path
    extra = [] if names_flag(words, (SERVED_NAME_FLAG,)) else [SERVED_NAME_FLAG, name]
    if command:
        container["command"] = words[:len(command)]
    container["args"] = words[len(command):] + extra


def add_model(pod_spec: dict[str, Any], main: dict[str, Any], spec: InferenceServiceSpec, namespace: str,
              model_cache: ModelCachePolicy | None, worker: int, pods: int) -> None:
    """``spec.model``'s weights for pod ``worker`` of a group of ``pods``: :func:`mount_model`, then,
    when they are mounted, :func:`point_engine` at ``model.mountPath``; nothing without ``spec.model``.

    Called before the group's start script is made of the main container's command
    (:func:`kubeforge.builders.serving.engine_command`), so the leader's ``vllm serve`` and every
    SGLang pod carry the flag. No flag on a vLLM group's ray workers (``worker`` > 0): they load
    their shards for the leader's engine and run no server of their own. No flag either on a
    group's pods that run the image's entrypoint (no command, no args): ``engine_command`` leaves
    them alone, and a flag alone in ``args`` would become the group's start command.
    """
    model = spec.model
    if model is None or not mount_model(pod_spec, main, model, namespace, model_cache):
        return
    if (worker > 0 and spec.engine == Engine.VLLM) or (pods > 1 and not (main.get("command") or main.get("args"))):
        return
    point_engine(main, spec.engine, model.mount_path)
