"""Only the native kernels live here; everything else about the package is in pyproject.toml.

`pip install -e .` compiles lsp_server/kernels/native with this machine's compiler into
lsp_server.kernels.native._native (loaded through ctypes). The extension is optional: without
a compiler the install goes on and the Python side reports the kernels as unavailable."""

from glob import glob

from setuptools import Extension, setup

NATIVE = "lsp_server/kernels/native"

setup(
    ext_modules=[
        Extension(
            "lsp_server.kernels.native._native",
            sources=sorted(glob(f"{NATIVE}/*.c")),
            depends=sorted(glob(f"{NATIVE}/*.h")),
            include_dirs=[NATIVE],
            # -ffp-contract=off: every variant must give the reference's bits (blocks.h
            # also says so in a pragma); no -ffast-math, no -march: ISA files pick their own.
            extra_compile_args=["-O3", "-ffp-contract=off", "-pthread", "-std=c11"],
            extra_link_args=["-pthread"],
            libraries=["m"],
            optional=True,
        )
    ],
)
