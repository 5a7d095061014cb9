# icesink as a container: a static binary (CGO_ENABLED=0: the SQLite
# catalog driver is pure Go) on a distroless base, running as non-root.
#   docker build -t icesink .
#   docker run --rm icesink version
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/icesink ./cmd/icesink

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/icesink /usr/local/bin/icesink
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/icesink"]
CMD ["version"]
