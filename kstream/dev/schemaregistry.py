"""A real Confluent-compatible Schema Registry on this machine (Apicurio Registry, in
memory), for demos and tests.

Neither Confluent's registry nor Karapace is on Maven Central or PyPI as a runnable
server; Apicurio Registry is, as a Quarkus application library
(``io.apicurio:apicurio-registry-app``) whose Confluent-compatible API
(``/apis/ccompat/v6``) confluent-kafka's ``SchemaRegistryClient`` speaks. It is
built once into a runnable jar (Quarkus' build step, ``mvn package`` of a small pom,
:func:`kstream.dev.maven.build`) and cached under
``$XDG_CACHE_HOME/kstream/apicurio-registry-<version>``. Two pieces of 2.4.2's build
are not on Maven Central and are stood in for: the config-index build step (one bean,
an empty list of dynamic settings: ``CONFIG_BEANS``) and everit's JSON Schema library
(the same code, published as ``com.github.erosb:everit-json-schema``).

Storage is Apicurio's in-memory H2 database: a restart starts empty. Lifecycle as
every development server's (:class:`kstream.dev.server.DevServer`); every failure is a :class:`SchemaRegistryError` saying
what to do.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import ClassVar

from kstream.dev.jvm import DevServerError, ServerKind, jvm_options
from kstream.dev.maven import Build, build
from kstream.dev.server import DevServer

APICURIO_VERSION = "2.4.2.Final"
QUARKUS_VERSION = "2.16.4.Final"  # the version Apicurio 2.4.2 is built with
RUNNER = "kstream-apicurio-registry-1-runner.jar"  # how a running registry JVM is recognised
CCOMPAT_PATH = "/apis/ccompat/v6"

POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kstream.local</groupId><artifactId>kstream-apicurio-registry</artifactId><version>1</version>
  <properties>
    <maven.compiler.source>11</maven.compiler.source><maven.compiler.target>11</maven.compiler.target>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencyManagement><dependencies>
    <dependency><groupId>io.apicurio</groupId><artifactId>apicurio-registry</artifactId>
      <version>{APICURIO_VERSION}</version><type>pom</type><scope>import</scope></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>io.apicurio</groupId><artifactId>apicurio-registry-app</artifactId>
      <version>{APICURIO_VERSION}</version>
      <exclusions>
        <exclusion><groupId>io.apicurio</groupId><artifactId>apicurio-common-app-components-config-index</artifactId></exclusion>
        <exclusion><groupId>com.github.everit-org.json-schema</groupId><artifactId>org.everit.json.schema</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency><groupId>com.github.erosb</groupId><artifactId>everit-json-schema</artifactId><version>1.14.2</version></dependency>
  </dependencies>
  <build><plugins><plugin>
    <groupId>io.quarkus</groupId><artifactId>quarkus-maven-plugin</artifactId><version>{QUARKUS_VERSION}</version>
    <executions><execution><goals><goal>build</goal></goals></execution></executions>
  </plugin></plugins></build>
</project>
"""
CONFIG_BEANS = """package kstream.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.ArrayList;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

/** What Apicurio's config-index build step (not on Maven Central) would add. */
@ApplicationScoped
public class ConfigBeans {
    @Produces
    @Singleton
    DynamicConfigPropertyList dynamicConfigProperties() {
        return new DynamicConfigPropertyList(new ArrayList<>());
    }
}
"""
APPLICATION_PROPERTIES = """\
quarkus.index-dependency.registryapp.group-id=io.apicurio
quarkus.index-dependency.registryapp.artifact-id=apicurio-registry-app
"""


class SchemaRegistryError(DevServerError):
    """The local schema registry could not be obtained, started or stopped; the message says why."""


REGISTRY = ServerKind(
    name="Schema Registry (Apicurio)",
    main_class=RUNNER,
    error=SchemaRegistryError,
    needs=f"Apicurio Registry {APICURIO_VERSION}",
    alternative="point schema.registry.url at an existing Confluent-compatible registry",
    stop_command="kill the registry's JVM",
)


def registry_build(version: str = APICURIO_VERSION) -> Build:
    """The Maven build of a runnable Apicurio Registry (see the module doc)."""
    return Build(
        name="apicurio-registry",
        version=version,
        files={
            "pom.xml": POM,
            "src/main/java/kstream/registry/ConfigBeans.java": CONFIG_BEANS,
            "src/main/resources/application.properties": APPLICATION_PROPERTIES,
        },
        outputs=(f"target/{RUNNER}", "target/lib"),
        proof=RUNNER,
        what=f"Apicurio Registry {version}",
        alternative=REGISTRY.alternative,
    )


class SchemaRegistry(DevServer):
    """One Apicurio Registry JVM: :meth:`start` builds (once), starts and waits until the
    Confluent-compatible API answers; :meth:`stop` stops it; ``url`` is what
    ``schema.registry.url`` takes."""

    KIND: ClassVar[ServerKind] = REGISTRY
    START_TIMEOUT: ClassVar[float] = 120.0

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL."""
        return f"http://{self.host}:{self.port}{CCOMPAT_PATH}"

    @property
    def address(self) -> str:
        return self.url

    @property
    def log_files(self) -> tuple[Path, ...]:
        return (self.data_dir / "registry.log",)

    def command(self, java: str) -> list[str]:
        """Build the registry (once), check the port: its command line."""
        home = build(registry_build(), self._env, error=SchemaRegistryError)
        self.claim_port("Schema Registry")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return [
            java,
            *jvm_options(self.heap),
            f"-Dquarkus.http.host={self.host}",
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.log.level=WARN",
            "-jar",
            str(home / RUNNER),
        ]

    def ready(self) -> bool:
        return answers(self.url)


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether the registry API at ``url`` answers ``GET /subjects`` with 200."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(url + "/subjects", timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False
