# Keybus broker image: builds the package and runs `keybus broker`.
FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY proto ./proto
COPY sdk ./sdk
COPY broker ./broker
COPY keybus ./keybus
COPY spark_connector ./spark_connector
COPY benchmarks ./benchmarks
RUN pip install --no-cache-dir .

VOLUME /data
EXPOSE 6650
# 0.0.0.0 inside the container; publish the port with -p 6650:6650.
CMD ["keybus", "broker", "--data-dir", "/data", "--host", "0.0.0.0", "--port", "6650"]
