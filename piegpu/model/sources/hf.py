"""Models from Hugging Face by repository id, through huggingface_hub: its cache, HF_HOME / HF_HUB_CACHE,
HF_HUB_OFFLINE, its token (HF_TOKEN or `hf auth login`), its downloads.

GGUF repositories give the file (or shards) of one quantization (model/sources/quant.py); safetensors repositories
(config.json + *.safetensors) give their snapshot folder, loaded as a local directory. The repository's file list comes
from the Hub, or from the cached snapshot when offline (HF_HUB_OFFLINE=1 or no network) -- so a model already in the
cache loads without the network.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import ModelError
from .quant import GgufGroup, choose_group, gguf_groups

FORM = "org/repo:QUANT (hf:org/repo:QUANT, @REVISION optional)"
# what a safetensors model directory needs: config, weights, tokenizer, chat template
SAFETENSORS_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.jinja", "*.txt"]


def _hub():
    import huggingface_hub
    return huggingface_hub


def _constants():
    from huggingface_hub import constants
    return constants


def _explain(e: Exception, repo_id: str, revision: str | None) -> ModelError:
    """huggingface_hub's error for `repo_id`, said with what to do about it."""
    from huggingface_hub import errors
    at = f"{repo_id}@{revision}" if revision else repo_id
    if isinstance(e, errors.GatedRepoError):
        return ModelError(f"{at} is a gated repository: its files need an accepted licence and a token "
                          f"(huggingface_hub: {_first_line(e)}). Fix: accept the terms on https://huggingface.co/"
                          f"{repo_id}, then `hf auth login` or set HF_TOKEN")
    if isinstance(e, errors.RevisionNotFoundError):
        return ModelError(f"{at}: no revision {revision!r} in that repository (huggingface_hub: {_first_line(e)}). "
                          "Fix: a branch, tag or commit of it, or no @REVISION for main")
    if isinstance(e, errors.RepositoryNotFoundError):
        return ModelError(f"{at}: no such model repository on Hugging Face, or it is private and no token with access "
                          f"was sent (huggingface_hub: {_first_line(e)}). Fix: check the id (org/repo), or "
                          "`hf auth login` / set HF_TOKEN for a private one")
    return ModelError(f"{at}: Hugging Face could not be reached or refused ({type(e).__name__}: {_first_line(e)}), "
                      f"and the cache has no copy. Fix: connect to the network, or pull it where there is one")


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def repo_files(repo_id: str, revision: str | None) -> tuple[dict[str, int | None], Path | None]:
    """(relative path -> size) of the repository's files, and the cached snapshot folder where the list came from it
    (offline, or the Hub out of reach); None when it came from the Hub."""
    hub = _hub()
    from huggingface_hub import errors
    reach: Exception | None = None
    if not _constants().HF_HUB_OFFLINE:
        try:
            tree = hub.HfApi().list_repo_tree(repo_id, revision=revision, recursive=True)
            return {f.path: getattr(f, "size", None) for f in tree if getattr(f, "size", None) is not None}, None
        except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError, errors.GatedRepoError) as e:
            raise _explain(e, repo_id, revision) from None
        except errors.HFValidationError as e:
            raise ModelError(f"{repo_id}: not a Hugging Face repository id ({_first_line(e)}). Fix: {FORM}") from None
        except Exception as e:  # the network: use the cache as huggingface_hub's downloads do
            reach = e
    try:
        snap = Path(hub.snapshot_download(repo_id, revision=revision, local_files_only=True, allow_patterns=[]))
    except errors.HFValidationError as e:
        raise ModelError(f"{repo_id}: not a Hugging Face repository id ({_first_line(e)}). Fix: {FORM}") from None
    except errors.LocalEntryNotFoundError:
        if reach is not None:
            raise _explain(reach, repo_id, revision) from None
        raise ModelError(f"{repo_id}{'@' + revision if revision else ''}: not in the Hugging Face cache "
                         f"({_constants().HF_HUB_CACHE}) and HF_HUB_OFFLINE is set, so it cannot be downloaded. "
                         f"Fix: unset HF_HUB_OFFLINE (or `piegpu models pull {repo_id}` where there is a network)") \
            from None
    return {str(p.relative_to(snap)).replace("\\", "/"): p.stat().st_size
            for p in snap.rglob("*") if p.is_file()}, snap


def resolve(repo_id: str, quant: str | None, revision: str | None, say) -> Path:
    """The local path of the model `repo_id[:quant][@revision]` names, downloaded into the cache if it is not there."""
    files, snap = repo_files(repo_id, revision)
    at = f"{repo_id}@{revision}" if revision else repo_id
    groups = gguf_groups(files)
    if not groups and "config.json" in files and any(f.endswith(".safetensors") for f in files):
        if quant is not None:
            raise ModelError(f"{at} is a safetensors repository (no GGUF files), so it has no :{quant} to pick. Fix: "
                             f"name it without :QUANT, or a GGUF repository of it")
        return _download_snapshot(repo_id, revision, at)
    where = f"{at}{' (as cached)' if snap is not None else ''}"
    group, why = choose_group(groups, quant, where, FORM)
    if len(groups) > 1 or quant is None:
        say(f"{at}: {group.label()} ({why})")
    return download_group(repo_id, revision, group, at)


def download_group(repo_id: str, revision: str | None, group: GgufGroup, at: str) -> Path:
    """Every file of `group` in the cache (downloaded where missing, with a progress bar); the first one's path."""
    from huggingface_hub import errors
    from ...runtime.progress import HubBar
    paths = []
    for name in group.files:
        try:
            paths.append(Path(_hub().hf_hub_download(repo_id, name, revision=revision, tqdm_class=HubBar)))
        except errors.HFValidationError as e:
            raise ModelError(f"{repo_id}: not a Hugging Face repository id ({_first_line(e)}). Fix: {FORM}") from None
        except (errors.EntryNotFoundError, errors.LocalEntryNotFoundError) as e:
            raise ModelError(f"{at}: {name} is listed but cannot be fetched ({_first_line(e)}); without a network only "
                             "files already in the cache load. Fix: connect, or pull it where there is one") from None
        except Exception as e:
            if isinstance(e, (ModelError, KeyboardInterrupt)):
                raise
            raise _explain(e, repo_id, revision) from None
    return paths[0]


def _download_snapshot(repo_id: str, revision: str | None, at: str) -> Path:
    from huggingface_hub import errors
    from ...runtime.progress import HubBar
    try:
        return Path(_hub().snapshot_download(repo_id, revision=revision, allow_patterns=SAFETENSORS_FILES,
                                             tqdm_class=HubBar))
    except errors.LocalEntryNotFoundError as e:
        raise ModelError(f"{at}: not all of its files are in the cache and it cannot be downloaded now "
                         f"({_first_line(e)}). Fix: connect, or pull it where there is one") from None
    except Exception as e:
        if isinstance(e, (ModelError, KeyboardInterrupt)):
            raise
        raise _explain(e, repo_id, revision) from None

