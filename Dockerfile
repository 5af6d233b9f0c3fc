# ztrain image (CPU backend). Build: docker build -t ztrain .
# Run:   docker run --rm -v $PWD/runs:/ztrain/runs ztrain train configs/tiny-cpu.toml
# For GPU VMs, build FROM an NVIDIA CUDA "devel" image of the same Debian/Ubuntu family with
# --build-arg BASE=...; CMake compiles the CUDA sources whenever nvcc is present.
ARG BASE=debian:bookworm
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /ztrain
COPY . .
RUN ZTRAIN_SKIP_TEST_DEPS=1 tools/install_deps.sh \
 && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release \
 && cmake --build build -j"$(nproc)" \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/ztrain/build/bin:$PATH
# Open MPI refuses to run as root unless told; containers usually are root.
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENTRYPOINT ["ztrain"]
CMD ["--help"]
