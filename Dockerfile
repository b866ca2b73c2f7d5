# Keybus broker image: builds the package and runs `keybus broker`.
#
# Two stages: the slim image has no C compiler, and without one the install
# skips the native modules (setup.py) and the broker does their work in Python,
# slower. So the wheel is built on the full image (same Debian release, same
# Python), checked to hold the native modules, and installed on the slim one.
FROM python:3.11-bookworm AS build

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY proto ./proto
COPY sdk ./sdk
COPY broker ./broker
COPY keybus ./keybus
COPY spark_connector ./spark_connector
COPY benchmarks ./benchmarks
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && python -c "import glob, sys, zipfile; \
names = zipfile.ZipFile(glob.glob('/wheels/*.whl')[0]).namelist(); \
built = [n for n in names if n.endswith('.so')]; \
print('native modules:', built); \
sys.exit(0 if len(built) == 4 else 'the wheel lacks native modules (setup.py)')"

FROM python:3.11-slim-bookworm

COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels

VOLUME /data
EXPOSE 6650
# 0.0.0.0 inside the container; publish the port with -p 6650:6650.
CMD ["keybus", "broker", "--data-dir", "/data", "--host", "0.0.0.0", "--port", "6650"]
