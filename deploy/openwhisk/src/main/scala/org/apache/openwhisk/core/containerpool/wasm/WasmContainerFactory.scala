/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not
 * use this file except in compliance with the License. You may obtain a copy
 * of the License at http://www.apache.org/licenses/LICENSE-2.0
 */

package org.apache.openwhisk.core.containerpool.wasm

import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration._

import org.apache.pekko.actor.ActorSystem
import org.apache.pekko.http.scaladsl.Http
import org.apache.pekko.http.scaladsl.model.{HttpMethods, HttpRequest, Uri}
import pureconfig._
import pureconfig.generic.auto._

import org.apache.openwhisk.common.{Logging, TransactionId}
import org.apache.openwhisk.core.{ConfigKeys, WhiskConfig}
import org.apache.openwhisk.core.containerpool._
import org.apache.openwhisk.core.entity.{ByteSize, ExecManifest, InvokerInstanceId}

/**
 * Where the invoker finds its Luge executor (`luge serve`, normally on the
 * same host), from `whisk.wasm-container-factory` in the invoker's config.
 *
 * @param executorHost host of `luge serve`; loopback, as its container API
 *                     has no authentication of its own
 * @param executorPort its port
 * @param logPollInterval how often logs are fetched while waiting for the
 *                        sentinels; 10 ms keeps the added latency of log
 *                        collection below an activation's own overhead
 * @param logWaitTimeout how long to wait for both sentinels after an
 *                       activation; Luge writes them as the run ends, so two
 *                       seconds is only reached when something is wrong
 */
case class WasmContainerFactoryConfig(executorHost: String = "127.0.0.1",
                                      executorPort: Int = 8080,
                                      logPollInterval: FiniteDuration = 10.milliseconds,
                                      logWaitTimeout: FiniteDuration = 2.seconds)

/**
 * Creates OpenWhisk containers as sandboxes of a Luge executor instead of
 * Docker containers: a container is an id on `luge serve`, created by its
 * first `/{id}/init`. Nothing is pulled or started, so `createContainer`
 * completes at once; the cold start is the init.
 *
 * Container ids start with this invoker's prefix
 * (`ContainerFactory.containerNamePrefix`, as Docker names do), so
 * `cleanup()` removes exactly this invoker's containers.
 */
class WasmContainerFactory(instance: InvokerInstanceId,
                           config: WasmContainerFactoryConfig,
                           containerArgs: ContainerArgsConfig)(implicit as: ActorSystem,
                                                               ec: ExecutionContext,
                                                               logging: Logging)
    extends ContainerFactory {

  private val prefix = ContainerFactory.containerNamePrefix(instance) + "_"
  private val executor = s"http://${config.executorHost}:${config.executorPort}"

  /**
   * ContainerProxy names containers `{prefix}_{n}_{namespace}_{action}`,
   * unique within this invoker's run (Docker uses the name as is, too); a
   * name without the prefix gets it, so that `cleanup()` finds it. Luge
   * accepts ids of letters, digits, '-', '_' and '.', up to 128 characters.
   */
  private def containerId(name: String): ContainerId = {
    val raw = if (name.startsWith(prefix)) name else prefix + name
    ContainerId(raw.filter(c => c.isLetterOrDigit || c == '-' || c == '_' || c == '.').take(128))
  }

  /**
   * The image names the runtime kind (`wasm:0.1`); the code comes with init.
   * Memory and time are enforced by Luge per sandbox from the action's limits
   * (see `WasmContainer.initBody`); CPU shares and limits have no meaning for
   * a sandbox that runs on the executor's scheduler.
   */
  override def createContainer(tid: TransactionId,
                               name: String,
                               actionImage: ExecManifest.ImageName,
                               userProvidedImage: Boolean,
                               memory: ByteSize,
                               cpuShares: Int,
                               cpuLimit: Option[Double])(implicit config: WhiskConfig,
                                                         logging: Logging): Future[Container] = {
    // What Docker passes as `-e`: the API host and the operator's extra variables.
    val env = Map("__OW_API_HOST" -> config.wskApiHost) ++ containerArgs.extraEnvVarMap
    Future.successful(
      new WasmContainer(
        containerId(name),
        ContainerAddress(this.config.executorHost, this.config.executorPort),
        env,
        this.config))
  }

  /** As Docker's factory does at start: what a previous run of this invoker left is removed. */
  override def init(): Unit = purge()

  /**
   * Destroys every container of this invoker on the executor (at
   * shutdown). Blocks until Luge has answered, as the SPI asks.
   */
  override def cleanup(): Unit = purge()

  private def purge(): Unit = {
    val request = HttpRequest(HttpMethods.DELETE, Uri(s"$executor/containers").withQuery(Uri.Query("prefix" -> prefix)))
    val purge = Http()
      .singleRequest(request)
      .flatMap(r => r.entity.toStrict(10.seconds).map(e => (r.status, e.data.utf8String)))
    try {
      val (status, body) = Await.result(purge, 30.seconds)
      if (status.isSuccess()) logging.info(this, s"cleanup: $body")(TransactionId.invoker)
      else logging.error(this, s"cleanup of containers '$prefix*' failed: $status $body")(TransactionId.invoker)
    } catch {
      case t: Exception => logging.error(this, s"cleanup of containers '$prefix*' failed: $t")(TransactionId.invoker)
    }
  }
}

/** The SPI entry the invoker loads (see invoker.conf in this directory). */
object WasmContainerFactoryProvider extends ContainerFactoryProvider {
  override def instance(actorSystem: ActorSystem,
                        logging: Logging,
                        config: WhiskConfig,
                        instanceId: InvokerInstanceId,
                        parameters: Map[String, Set[String]]): ContainerFactory = {
    val factoryConfig = loadConfigOrThrow[WasmContainerFactoryConfig]("whisk.wasm-container-factory")
    val containerArgs = loadConfigOrThrow[ContainerArgsConfig](ConfigKeys.containerArgs)
    new WasmContainerFactory(instanceId, factoryConfig, containerArgs)(actorSystem, actorSystem.dispatcher, logging)
  }
}
