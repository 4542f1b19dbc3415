# One image per component: docker build --build-arg COMPONENT=taint-manager -t evictkit/taint-manager:0.1.0 .
# The same content as `cargo xtask image` (which needs no Docker): one static binary at /manager,
# user 65532, no shell, the OCI labels. COMPONENT is one of affinity-evictor, taint-manager,
# pdb-policy-webhook, evictionrequest-controller, descheduler-bridge.
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
ARG COMPONENT
WORKDIR /src
COPY . .
# The same flags and the same build as xtask/src/image.rs (its test
# the_dockerfile_builds_what_xtask_image_builds keeps them equal): a static glibc binary without
# symbols, built together with every image's binary, so dependency features unify as there and
# the component's binary is the same.
ENV RUSTFLAGS="-C target-feature=+crt-static -C strip=symbols"
RUN test -n "${COMPONENT}" && \
    cargo build --release --locked --target x86_64-unknown-linux-gnu \
      --package affinity-evictor --package taint-manager --package pdb-policy-webhook \
      --package evictionrequest-controller --package descheduler-bridge --package evictkit-pause && \
    cp "target/x86_64-unknown-linux-gnu/release/${COMPONENT}" /manager

FROM scratch
ARG COMPONENT
ARG VERSION=0.1.0
# cargo xtask image takes these from git; for the same labels pass
# --build-arg REVISION=$(git rev-parse HEAD)
# --build-arg CREATED=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
ARG REVISION=unknown
ARG CREATED
LABEL org.opencontainers.image.source="https://github.com/evictkit/evictkit" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.title="${COMPONENT}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build --chmod=0755 /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
