#!/bin/bash
# Entry point of kstream-test/kafka: server.properties from the defaults and KAFKA_*
# variables, storage formatted once, then the broker in the foreground (exec: it gets
# the container's SIGTERM and shuts down cleanly).
set -euo pipefail
CONF=/opt/kafka/config/server.properties
declare -A props=(
    [node.id]=1
    [process.roles]=broker,controller
    [listeners]=PLAINTEXT://:9092,CONTROLLER://:9093
    [advertised.listeners]=PLAINTEXT://localhost:9092
    [controller.listener.names]=CONTROLLER
    [listener.security.protocol.map]=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
    [controller.quorum.voters]=1@localhost:9093
    [log.dirs]=/var/lib/kafka/data
    [offsets.topic.replication.factor]=1
    [transaction.state.log.replication.factor]=1
    [transaction.state.log.min.isr]=1
    [group.initial.rebalance.delay.ms]=0
)
while IFS='=' read -r name value; do
    case "$name" in
        KAFKA_HEAP_OPTS|KAFKA_OPTS|KAFKA_HEALTH_PORT) continue ;;
        KAFKA_*) key=${name#KAFKA_} ;;
        *) continue ;;
    esac
    key=${key,,}; key=${key//___/-}; key=${key//__/@}; key=${key//_/.}; key=${key//@/_}
    props[$key]=$value
done < <(env)
: > "$CONF"
for key in "${!props[@]}"; do echo "$key=${props[$key]}" >> "$CONF"; done
CP='/opt/kafka/libs/*'
JAVA_OPTS=(${KAFKA_HEAP_OPTS:--Xms256m -Xmx256m} -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError
           -Djava.awt.headless=true ${KAFKA_OPTS:-})
data=${props[log.dirs]%%,*}
if [ ! -f "$data/meta.properties" ]; then
    java -Xmx256m -cp "$CP" kafka.tools.StorageTool format \
        "--cluster-id=${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" -c "$CONF" --ignore-formatted
fi
exec java "${JAVA_OPTS[@]}" -cp "$CP" kafka.Kafka "$CONF"
