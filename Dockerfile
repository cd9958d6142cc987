# The twill image: the daemon (dist/src, run by Node 24) and the CNI plugin
# (dist/twill-cni, a single executable the DaemonSet's init container copies
# to the host's /opt/cni/bin/twill), with the tools twill runs: ip and
# bridge (iproute2), iptables, nft; nsenter comes with util-linux; and
# jemalloc, twill's malloc.
#   docker build -t twill:0.1.0 .

FROM node:24-bookworm-slim AS build
WORKDIR /src
# binutils: `strip` for the CNI executable (optional, it only makes it smaller)
RUN apt-get update && apt-get install -y --no-install-recommends binutils && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
RUN npm ci
COPY . .
# the daemon's code cache is taken by the Node that will run it, the image's (npm would run the
# build with the node package's, first on its PATH: scripts/build-daemon.ts)
RUN TWILL_BUILD_NODE=/usr/local/bin/node npm run build && npm prune --omit=dev

FROM node:24-bookworm-slim
RUN apt-get update \
  && apt-get install -y --no-install-recommends iproute2 iptables nftables libjemalloc2 \
  && rm -rf /var/lib/apt/lists/*
# twill's malloc: jemalloc, one arena, no thread caches (src/cli/allocator.ts, which keeps it from
# the tools twill runs)
ENV LD_PRELOAD=libjemalloc.so.2 MALLOC_CONF=narenas:1,tcache:false
WORKDIR /usr/local/lib/twill
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist/src ./dist/src
COPY --from=build /src/dist/twill-cni ./twill-cni
RUN ln -s /usr/local/lib/twill/dist/src/cli/main.js /usr/local/bin/twill && chmod 0755 dist/src/cli/main.js
# the symlink keeps the shebang's Node flags (see src/cli/loader.ts)
ENTRYPOINT ["/usr/local/bin/twill"]
