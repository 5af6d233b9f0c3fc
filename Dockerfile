# ztrain images. Targets:
#   cuda (the default, the last stage): built on an NVIDIA CUDA "devel" image; the runtime stage
#        sits on the matching "runtime" image (CUDA, cuBLAS, NCCL) with Open MPI and only the
#        binaries and what they load.
#          docker build -t ztrain .
#          docker run --rm --gpus all -v /data:/data -v /ssd:/cache -v /ckpt:/checkpoints ztrain train /data/run.toml
#   cpu  Debian, the CPU backend:        docker build --target cpu -t ztrain:cpu .
# Both run as the user "ztrain" (uid 1000). Mount points: /data (datasets, run specs), /cache
# ([data] cache_dir), /checkpoints ([checkpoint] dir); out_dir defaults to the working directory
# /work. Multi-GPU in one container: docker run ... --entrypoint mpirun ztrain -np 8 ztrain train ...
# tools/docker_check.sh builds and tests the cpu target (README, "Docker").
ARG CPU_BASE=debian:bookworm
ARG TEST_FROM=cpu
ARG CUDA_DEVEL_BASE=nvidia/cuda:13.0.0-devel-ubuntu24.04
ARG CUDA_RUNTIME_BASE=nvidia/cuda:13.0.0-runtime-ubuntu24.04

# ---- cpu: build ----
FROM ${CPU_BASE} AS cpu-build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY . .
RUN ZTRAIN_SKIP_TEST_DEPS=1 tools/install_deps.sh \
 && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DZTRAIN_CUDA=OFF -DBUILD_TESTING=OFF \
 && cmake --build build -j"$(nproc)" --target ztrain ztrain-tokenize ztrain-bench-comm ztrain-bench-data

# ---- cpu: runtime (Debian packages the binaries load, nothing else) ----
FROM ${CPU_BASE} AS cpu-runtime
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libopenblas0-openmp libgomp1 zlib1g libpcre2-8-0 libcurl4 \
      libspdlog1.10 libfmt9 libtomlplusplus3 libhdf5-103-1 libopenmpi3 openmpi-bin ca-certificates gnuplot-nox liburing2 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 ztrain \
 && mkdir -p /data /cache /checkpoints /work /opt/ztrain \
 && chown ztrain:ztrain /data /cache /checkpoints /work
ENV PATH=/opt/ztrain/bin:$PATH
WORKDIR /work
VOLUME ["/data", "/cache", "/checkpoints"]

FROM cpu-runtime AS cpu
COPY --from=cpu-build /src/build/bin/ztrain /src/build/bin/ztrain-tokenize /src/build/bin/ztrain-bench-comm \
     /src/build/bin/ztrain-bench-data /opt/ztrain/bin/
COPY configs /opt/ztrain/configs
COPY data/demo /opt/ztrain/demo
USER ztrain
ENTRYPOINT ["ztrain"]
CMD ["--help"]

# ---- tools/docker_check.sh only ----
# cpu-prebuilt: the cpu image around binaries built on a Debian bookworm host (the script puts
# them in the build context as prebuilt/bin): CI's quick variant, without a second compile.
FROM cpu-runtime AS cpu-prebuilt
COPY prebuilt/bin/ /opt/ztrain/bin/
COPY configs /opt/ztrain/configs
COPY data/demo /opt/ztrain/demo
USER ztrain
ENTRYPOINT ["ztrain"]
CMD ["--help"]

# cpu-test: runs what the image holds, as its user, while the image is built (the sandbox's
# podman cannot start containers): every shipped config checks, and the demo trains.
FROM ${TEST_FROM} AS cpu-test
COPY --chown=ztrain:ztrain tools/docker_selftest.sh /opt/ztrain/docker_selftest.sh
RUN /opt/ztrain/docker_selftest.sh

# ---- cuda: build ----
FROM ${CUDA_DEVEL_BASE} AS cuda-build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY . .
RUN ZTRAIN_SKIP_TEST_DEPS=1 tools/install_deps.sh \
 && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF "-DCMAKE_CUDA_ARCHITECTURES=80;90" \
 && cmake --build build -j"$(nproc)" --target ztrain ztrain-tokenize ztrain-bench-comm ztrain-bench-data

# ---- cuda: runtime (the CUDA runtime image carries cudart, cuBLAS and NCCL) ----
FROM ${CUDA_RUNTIME_BASE} AS cuda
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libopenblas0-openmp libgomp1 zlib1g libpcre2-8-0 libcurl4t64 \
      libspdlog1.12 libfmt9 libtomlplusplus3 libhdf5-103-1t64 libopenmpi3t64 openmpi-bin ca-certificates liburing2 \
 && rm -rf /var/lib/apt/lists/* \
 && (id -u ztrain >/dev/null 2>&1 || useradd --create-home --uid 1000 ztrain || useradd --create-home ztrain) \
 && mkdir -p /data /cache /checkpoints /work /opt/ztrain \
 && chown ztrain:ztrain /data /cache /checkpoints /work
COPY --from=cuda-build /src/build/bin/ /opt/ztrain/bin/
COPY configs /opt/ztrain/configs
COPY data/demo /opt/ztrain/demo
ENV PATH=/opt/ztrain/bin:$PATH
WORKDIR /work
VOLUME ["/data", "/cache", "/checkpoints"]
USER ztrain
ENTRYPOINT ["ztrain"]
CMD ["--help"]
