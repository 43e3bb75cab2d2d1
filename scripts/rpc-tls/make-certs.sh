#!/usr/bin/env bash
# Make a private CA and a server certificate signed by it, for
# `tessera rpc-server --tls-cert server.pem --tls-key server.key` and
# `tessera run --rpc HOST:PORT --rpc-ca ca.pem`.
#
#   scripts/rpc-tls/make-certs.sh OUT_DIR [NAME_OR_IP ...]
#
# The names (default: localhost 127.0.0.1 ::1) are the server's DNS names
# and IP addresses the client may connect by. Keys are EC P-256 (PKCS#8).
# The test fixtures in crates/tessera-rpc/tests/data/tls were made with
# `make-certs.sh crates/tessera-rpc/tests/data/tls` (plus a second CA,
# other-ca.pem, that signed nothing): test keys, never use them.
set -euo pipefail
out=${1:?usage: make-certs.sh OUT_DIR [NAME_OR_IP ...]}
shift
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(localhost 127.0.0.1 ::1)
san=""
for n in "${names[@]}"; do
  if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+="IP:$n,"; else san+="DNS:$n,"; fi
done
san=${san%,}
mkdir -p "$out"
cd "$out"
days=36500
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
openssl req -x509 -new -key ca.key -days "$days" -subj "/CN=tessera-rpc test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.pem
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key
openssl req -new -key server.key -subj "/CN=tessera-rpc server" -out server.csr
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$san" > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" \
  -extfile server.ext -out server.pem
rm -f server.csr server.ext ca.srl
echo "made $out/ca.pem, $out/server.pem, $out/server.key (names: ${names[*]})"
