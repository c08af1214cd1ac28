#!/bin/bash
# Entry point of kstream-test/s3proxy: the buckets, the configuration, then S3Proxy in
# the foreground (exec: it gets the container's SIGTERM).
set -euo pipefail
port=${S3_PORT:-8080}
for bucket in ${S3_BUCKETS:-kstream}; do mkdir -p "/data/buckets/$bucket"; done
cat > /opt/s3proxy/s3proxy.conf <<CONF
s3proxy.endpoint=http://0.0.0.0:$port
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=${S3_ACCESS_KEY:-kstream}
s3proxy.credential=${S3_SECRET_KEY:-kstream-secret}
s3proxy.ignore-unknown-headers=true
jclouds.provider=filesystem-nio2
jclouds.identity=${S3_ACCESS_KEY:-kstream}
jclouds.credential=${S3_SECRET_KEY:-kstream-secret}
jclouds.filesystem.basedir=/data/buckets
CONF
exec java -Xms128m -Xmx256m -XX:+UseSerialGC -Dlogback.configurationFile=/opt/s3proxy/logback.xml \
    -cp '/opt/s3proxy/libs/*' org.gaul.s3proxy.Main --properties /opt/s3proxy/s3proxy.conf
