/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not
 * use this file except in compliance with the License. You may obtain a copy
 * of the License at http://www.apache.org/licenses/LICENSE-2.0
 */

package org.apache.openwhisk.core.containerpool.wasm

import java.util.concurrent.atomic.AtomicLong

import scala.concurrent.{ExecutionContext, Future}
import scala.concurrent.duration._

import org.apache.pekko.actor.ActorSystem
import pureconfig._
import pureconfig.generic.auto._

import org.apache.openwhisk.common.{Logging, TransactionId}
import org.apache.openwhisk.core.WhiskConfig
import org.apache.openwhisk.core.containerpool._
import org.apache.openwhisk.core.entity.{ByteSize, ExecManifest, InvokerInstanceId}

/**
 * Where the invoker finds its Luge executor (`luge serve`, normally on the
 * same host), from `whisk.wasm-container-factory` in the invoker's config.
 *
 * @param executorHost host of `luge serve`
 * @param executorPort its port
 * @param logPollInterval how often logs are fetched while waiting for the sentinel
 * @param logWaitTimeout how long to wait for both sentinels after an activation
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
 */
class WasmContainerFactory(instance: InvokerInstanceId, config: WasmContainerFactoryConfig)(implicit as: ActorSystem,
                                                                                           ec: ExecutionContext,
                                                                                           logging: Logging)
    extends ContainerFactory {

  private val prefix = ContainerFactory.containerNamePrefix(instance)
  private val created = new AtomicLong()

  /** Luge accepts ids of letters, digits, '-', '_' and '.', up to 128 characters. */
  private def containerId(name: String): ContainerId = {
    val raw = s"${prefix}_${created.incrementAndGet()}_$name"
    ContainerId(raw.filter(c => c.isLetterOrDigit || c == '-' || c == '_' || c == '.').take(128))
  }

  override def createContainer(tid: TransactionId,
                               name: String,
                               actionImage: ExecManifest.ImageName,
                               userProvidedImage: Boolean,
                               memory: ByteSize,
                               cpuShares: Int)(implicit config: WhiskConfig, logging: Logging): Future[Container] = {
    // The image names the runtime kind (wasm:0.1); the code comes with init.
    // Memory is enforced by Luge per sandbox from the action's limits.
    Future.successful(
      new WasmContainer(
        containerId(name),
        ContainerAddress(this.config.executorHost, this.config.executorPort),
        this.config))
  }

  override def init(): Unit = ()

  /**
   * Containers of a previous invoker run are not listed by Luge; restarting
   * `luge serve` with the invoker (as the systemd unit in deploy/ does)
   * clears them.
   */
  override def cleanup(): Unit = ()
}

/** The SPI entry the invoker loads (see invoker.conf in this directory). */
object WasmContainerFactoryProvider extends ContainerFactoryProvider {
  override def instance(actorSystem: ActorSystem,
                        logging: Logging,
                        config: WhiskConfig,
                        instanceId: InvokerInstanceId,
                        parameters: Map[String, Set[String]]): ContainerFactory = {
    val factoryConfig = loadConfigOrThrow[WasmContainerFactoryConfig]("whisk.wasm-container-factory")
    new WasmContainerFactory(instanceId, factoryConfig)(actorSystem, actorSystem.dispatcher, logging)
  }
}
