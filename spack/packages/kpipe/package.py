# Spack recipe for kpipe, kept in kpipe's own repository (docs/cluster.md shows how to use it):
#
#   spack repo add <kpipe checkout>/spack
#   spack env activate <kpipe checkout>/spack/environments/cpu     # or .../cuda
#   spack install
#
# The environments build the checkout they sit in (`develop:`), so no download of kpipe's source is
# needed; `spack install kpipe@main` outside an environment clones `git` below instead.
# Package API v1 layout (packages/<name>/package.py), which Spack 0.23 and every Spack 1.x read; checked
# offline with Spack 1.2 by .ci/jobs/40-spack.sh.
import os

from spack.package import *


class Kpipe(CMakePackage, CudaPackage):
    """Pipeline-parallel training of GPT language models: layers are Kokkos kernels (CUDA on GPU nodes,
    Serial/OpenMP on CPUs), pipeline stages are MPI ranks (NCCL between GPUs), checkpoints are HDF5."""

    homepage = "https://github.com/kpipe/kpipe"
    git = "https://github.com/kpipe/kpipe.git"

    version("main", branch="main")

    variant("openmp", default=False, description="Kokkos OpenMP host backend: threads within each rank")
    variant("tests", default=False, description="Build the GoogleTest suite and the benchmarks")
    variant("nccl", default=False, when="+cuda", description="NCCL for stage-to-stage transfers between GPUs")
    variant(
        "cuda_aware_mpi",
        default=False,
        when="+cuda",
        description="Pass device buffers straight to MPI (needs an MPI built with CUDA support)",
    )

    # C as well as C++: the CMake finders of MPI and HDF5 compile C probes.
    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")

    depends_on("mpi")
    depends_on("hdf5+mpi")
    depends_on("zlib-api")
    depends_on("fmt@8:")  # fmt::format_string
    depends_on("nlohmann-json@3:")
    depends_on("tomlplusplus@3:")
    depends_on("cli11@2:")

    # Kokkos 4.4 or later, Kokkos 5 included. Kokkos 5 builds in C++20 only and kpipe compiles as C++20:
    # checked against Kokkos 4.6 with -std=c++20 (builds, tests pass) and with Kokkos' deprecated 4.x API
    # switched off, which is what Kokkos 5 removes; no Kokkos 5 could be built offline. cmake_args()
    # passes Kokkos' C++ standard on. Kokkos Kernels' recipe pins its Kokkos to the same version, and
    # kpipe's matrix products need its BLAS component. fmt 12.1 and CLI11 2.6.1, the newest that Spack
    # picks, were checked the same way (Debian 12 has fmt 9.1 and CLI11 2.1).
    depends_on("kokkos@4.4:")
    depends_on("kokkos-kernels@4.4: +blas")
    depends_on("kokkos+openmp", when="+openmp")

    # GPUs: Kokkos' CUDA backend through its nvcc_wrapper (kpipe's CMake hands nvcc-specific options to it),
    # cuBLAS for the matrix products (fp32 through Kokkos Kernels' cuBLAS TPL, which kpipe's CMake requires;
    # bf16 and TF32 by kpipe itself, with Kokkos Kernels' handle), the kernels' device lambdas (a Kokkos 4
    # option; always on in Kokkos 5).
    depends_on("kokkos+cuda+wrapper", when="+cuda")
    depends_on("kokkos-kernels+cuda+cublas", when="+cuda")
    requires("^kokkos+cuda_lambda", when="+cuda ^kokkos@:4")
    conflicts("cuda_arch=none", when="+cuda", msg="kpipe+cuda needs the GPU's architecture, e.g. cuda_arch=90 (H100/H200)")
    depends_on("nccl", when="+nccl")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"nccl cuda_arch={_arch}", when=f"+nccl cuda_arch={_arch}")
    # A CUDA-aware MPI: one of the MPIs whose recipe has a CUDA build (Cray MPICH: its GPU Transport Layer).
    requires(
        "^openmpi+cuda",
        "^mpich+cuda",
        "^cray-mpich+cuda",
        "^mvapich-plus+cuda",
        policy="one_of",
        when="+cuda_aware_mpi",
        msg="+cuda_aware_mpi needs an MPI built with CUDA: openmpi+cuda, mpich+cuda, cray-mpich+cuda or mvapich-plus+cuda",
    )

    depends_on("googletest@1.10:", type=("build", "test"), when="+tests")
    depends_on("benchmark", type="build", when="+tests")

    # What `spack test run kpipe` builds against the installed package (see test_install_consumer).
    consumer_dir = join_path("tests", "install", "consumer")
    test_requires_compiler = True

    def cmake_args(self):
        spec = self.spec
        kokkos = self["kokkos"]  # the package (kokkos_cxx lives there), not the spec
        args = [
            self.define("KPIPE_ENABLE_APPS", True),
            self.define_from_variant("KPIPE_ENABLE_TESTS", "tests"),
            self.define_from_variant("KPIPE_ENABLE_BENCHMARKS", "tests"),
            self.define("KPIPE_ENABLE_NCCL", spec.satisfies("+nccl")),
            self.define("KPIPE_ENABLE_CUDA_AWARE_MPI", spec.satisfies("+cuda_aware_mpi")),
            # Spack's compiler wrappers add the target's flags (target=...): no -march=native on top.
            self.define("KPIPE_ENABLE_NATIVE_ARCH", False),
            # Kokkos' C++ standard (17 or 20 for Kokkos 4, 20 for Kokkos 5) for kpipe's own sources.
            self.define("CMAKE_CXX_STANDARD", spec["kokkos"].variants["cxxstd"].value),
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            # The BPE tokenizer needs SentencePiece, which this recipe does not depend on: never pick up a
            # system copy by accident (byte tokens only; BPE token files are refused with a message).
            self.define("KPIPE_ENABLE_SENTENCEPIECE", "OFF"),
        ]
        if spec.satisfies("+cuda"):
            # Every kpipe source goes through nvcc_wrapper, which compiles the kernels' lambdas for the GPU.
            args.append(self.define("CMAKE_CXX_COMPILER", kokkos.kokkos_cxx))
        return args

    @run_after("install")
    def cache_test_sources(self):
        """Keep the install-consumer project for `spack test run`."""
        cache_extra_test_sources(self, [self.consumer_dir])

    def _gpu_visible(self):
        smi = which("nvidia-smi")
        return smi is not None and "GPU" in smi("-L", output=str, error=os.devnull, fail_on_error=False)

    def test_train_help(self):
        """kpipe-train --help lists the configuration keys and the exit codes"""
        if self.spec.satisfies("+cuda") and not self._gpu_visible():
            # Kokkos' CUDA backend initializes before the options are read and needs a GPU.
            raise SkipTest("kpipe+cuda runs only where a GPU is visible")
        train = which(self.prefix.bin.join("kpipe-train"), required=True)
        out = train("--help", output=str.split, error=str.split)
        check_outputs(["--checkpoint-dir", "--pipeline-size", "Exit codes"], out)

    def test_install_consumer(self):
        """find_package(kpipe) from the install prefix: configure, build and run a small program"""
        source = join_path(self.test_suite.current_test_cache_dir, self.consumer_dir)
        build = join_path(self.test_suite.current_test_cache_dir, "consumer-build")
        # Kokkos and Kokkos Kernels named first and by their own roots: an external dependency installed
        # in /usr (an MPI, a CMake) must not let a system Kokkos shadow the one kpipe was built with.
        kokkos, kernels = self.spec["kokkos"].prefix, self.spec["kokkos-kernels"].prefix
        prefixes = [self.prefix, kokkos, kernels]
        for dep in self.spec.traverse(root=False, deptype="link"):
            if dep.prefix not in prefixes:
                prefixes.append(dep.prefix)
        # The compilers Spack sets up for tests (test_requires_compiler); nvcc_wrapper for CUDA, as kpipe.
        cc, cxx = os.environ.get("CC", "cc"), os.environ.get("CXX", "c++")
        if self.spec.satisfies("+cuda"):
            cxx = self["kokkos"].kokkos_cxx
        cmake = which(self.spec["cmake"].prefix.bin.cmake, required=True)
        # The C++ standard comes from Kokkos' targets (C++20 for Kokkos 5), as in any user's project.
        cmake(
            "-S", source, "-B", build,
            self.define("CMAKE_PREFIX_PATH", prefixes),
            self.define("Kokkos_ROOT", kokkos),
            self.define("KokkosKernels_ROOT", kernels),
            self.define("CMAKE_C_COMPILER", cc),
            self.define("CMAKE_CXX_COMPILER", cxx),
        )
        cmake("--build", build)
        if self.spec.satisfies("+cuda") and not self._gpu_visible():
            raise SkipTest("consumer built; running it needs a GPU")
        out = Executable(join_path(build, "consumer"))(output=str.split, error=str.split)
        check_outputs(["parameters"], out)
