/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not
 * use this file except in compliance with the License. You may obtain a copy
 * of the License at http://www.apache.org/licenses/LICENSE-2.0
 */

package org.apache.openwhisk.core.containerpool.wasm

import java.time.Instant

import scala.concurrent.{ExecutionContext, Future}
import scala.concurrent.duration._

import org.apache.pekko.NotUsed
import org.apache.pekko.actor.ActorSystem
import org.apache.pekko.http.scaladsl.Http
import org.apache.pekko.http.scaladsl.model._
import org.apache.pekko.pattern.after
import org.apache.pekko.stream.StreamLimitReachedException
import org.apache.pekko.stream.scaladsl.Source
import org.apache.pekko.util.ByteString
import spray.json._

import org.apache.openwhisk.common.{Logging, TransactionId}
import org.apache.openwhisk.core.containerpool._
import org.apache.openwhisk.core.containerpool.docker.{CompleteAfterOccurrences, OccurrencesNotFoundException}
import org.apache.openwhisk.core.containerpool.logging.LogLine
import org.apache.openwhisk.core.entity.{ByteSize, WhiskAction}
import org.apache.openwhisk.http.Messages

/**
 * One OpenWhisk container on a Luge executor (`luge serve`).
 *
 * Init and run are the trait's own (transid markers, the `shuttingDown`
 * check, timeouts, response limits and truncation): only the path changes,
 * `/{id}/init` and `/{id}/run` instead of `/init` and `/run`, with the same
 * bodies and replies. Logs come from `/{id}/logs`, destroy is
 * `/{id}/destroy`. Suspend and resume only close and reopen the HTTP
 * connections (the trait's): an idle sandbox holds no CPU.
 *
 * @param containerEnv what a Docker container gets as its environment
 *                     (`__OW_API_HOST` and the operator's extra variables);
 *                     Luge has no process per container, so it travels in
 *                     the init's `env`
 */
class WasmContainer(protected val id: ContainerId,
                    protected[core] val addr: ContainerAddress,
                    containerEnv: Map[String, String],
                    config: WasmContainerFactoryConfig)(implicit protected val as: ActorSystem,
                                                        protected val ec: ExecutionContext,
                                                        protected val logging: Logging)
    extends Container {

  private val base = s"http://${addr.host}:${addr.port}/${id.asString}"

  /**
   * The trait's init, with what Luge needs and OpenWhisk's init body lacks:
   * the container's environment, and the action's annotations (`wasi.*`,
   * `limits.*`, `sched.*`) and limits from the `WhiskAction` entity that
   * ContainerProxy passes.
   */
  override def initialize(initializer: JsObject,
                          timeout: FiniteDuration,
                          maxConcurrent: Int,
                          entity: Option[WhiskAction] = None)(implicit transid: TransactionId): Future[Interval] =
    super.initialize(WasmContainer.initBody(initializer, containerEnv, entity), timeout, maxConcurrent, entity)

  /** Every call of the trait goes to this container's path on the executor. */
  override protected def callContainer(path: String,
                                       body: JsObject,
                                       timeout: FiniteDuration,
                                       maxConcurrent: Int,
                                       maxResponse: ByteSize,
                                       truncation: ByteSize,
                                       retry: Boolean,
                                       reschedule: Boolean)(implicit transid: TransactionId): Future[RunResult] =
    super.callContainer(
      s"/${id.asString}$path",
      body,
      timeout,
      maxConcurrent,
      maxResponse,
      truncation,
      retry,
      reschedule)

  override def destroy()(implicit transid: TransactionId): Future[Unit] = {
    val request =
      HttpRequest(HttpMethods.POST, s"$base/destroy", entity = HttpEntity(ContentTypes.`application/json`, "{}"))
    Http()
      .singleRequest(request)
      .flatMap(_.discardEntityBytes().future())
      .map(_ => ())
      .recover { case t => logging.warn(this, s"destroy of $id failed: $t") }
      .flatMap(_ => super.destroy())
  }

  /**
   * The activation's log lines as Docker json-file lines, which
   * DockerToActivationLogStore parses, under Docker's contract: the
   * sentinels are consumed, never forwarded; past `limit` bytes the stream
   * ends with `Messages.truncateLogs`; with `waitForSentinel`, if both
   * sentinels do not arrive within `logWaitTimeout`, it ends with
   * `Messages.logFailure`.
   */
  override def logs(limit: ByteSize, waitForSentinel: Boolean)(
    implicit transid: TransactionId): Source[ByteString, Any] = {
    val deadline = Instant.now().plusMillis(config.logWaitTimeout.toMillis)
    WasmContainer
      .poll(fetch _, waitForSentinel, deadline, config.logPollInterval)
      .limitWeighted(limit.toBytes)(line => line.toJson.compactPrint.length.toLong + 1)
      .via(new CompleteAfterOccurrences[LogLine](_.log == Container.ACTIVATION_LOG_SENTINEL, 2, waitForSentinel))
      .map(line => ByteString(line.toJson.compactPrint))
      .recover {
        case _: StreamLimitReachedException =>
          ByteString(LogLine(Instant.now.toString, "stderr", Messages.truncateLogs(limit)).toJson.compactPrint)
        case _: OccurrencesNotFoundException | _: LogFetchError =>
          ByteString(LogLine(Instant.now.toString, "stderr", Messages.logFailure).toJson.compactPrint)
      }
  }

  /** Drains the lines Luge holds for this container. */
  private def fetch(): Future[Vector[LogLine]] =
    Http()
      .singleRequest(HttpRequest(HttpMethods.GET, s"$base/logs"))
      .flatMap { response =>
        response.entity.toStrict(config.logWaitTimeout).map { entity =>
          if (response.status.isSuccess()) WasmContainer.parseLogs(entity.data.utf8String)
          else throw LogFetchError(s"GET $base/logs: ${response.status}")
        }
      }
}

/** The executor's logs could not be read. */
case class LogFetchError(msg: String) extends Exception(msg)

object WasmContainer {

  /** Annotation keys Luge reads (the rest of an action's annotations stays behind). */
  private def forLuge(key: String) =
    key.startsWith("wasi.") || key.startsWith("limits.") || key.startsWith("sched.") || key == "dir" || key == "net_access"

  /**
   * The init body for Luge: OpenWhisk's initializer, its `env` extended with
   * the container's environment (the action's own values win, as
   * ContainerProxy's do over Docker's `-e`), and `annotations` from the
   * entity with the action's memory and time limits, which Luge enforces
   * (the lower of an annotation and the OpenWhisk limit).
   */
  def initBody(initializer: JsObject, containerEnv: Map[String, String], entity: Option[WhiskAction]): JsObject = {
    val env = initializer.fields.get("env") match {
      case Some(JsObject(fields)) => fields
      case _                      => Map.empty[String, JsValue]
    }
    val mergedEnv = containerEnv.map { case (k, v) => k -> (JsString(v): JsValue) } ++ env
    val annotations = entity.toSeq.flatMap { action =>
      val asked = action.annotations.toJsObject.fields.filter { case (k, _) => forLuge(k) }
      def lower(key: String, limit: Long): JsValue = asked.get(key) match {
        case Some(JsNumber(n)) if n < limit => JsNumber(n)
        case _                              => JsNumber(limit)
      }
      val limits = Map(
        "limits.memory_mb" -> lower("limits.memory_mb", action.limits.memory.megabytes.toLong),
        "limits.timeout_ms" -> lower("limits.timeout_ms", action.limits.timeout.duration.toMillis))
      (asked ++ limits).map { case (k, v) => JsObject("key" -> JsString(k), "value" -> v) }
    }
    val withEnv =
      if (mergedEnv.isEmpty) initializer.fields
      else initializer.fields + ("env" -> JsObject(mergedEnv))
    JsObject(if (annotations.isEmpty) withEnv else withEnv + ("annotations" -> JsArray(annotations.toVector)))
  }

  /** `{"logs":[{"stream","log","time_ms"}]}` as Docker's log lines. */
  def parseLogs(body: String): Vector[LogLine] =
    body.parseJson.asJsObject.fields.get("logs") match {
      case Some(JsArray(lines)) =>
        lines.collect {
          case JsObject(fields) =>
            val time = fields.get("time_ms").collect { case JsNumber(ms) => Instant.ofEpochMilli(ms.toLong) }
            LogLine(
              time.getOrElse(Instant.now()).toString,
              fields.get("stream").collect { case JsString(s) => s }.getOrElse("stdout"),
              fields.get("log").collect { case JsString(s) => s }.getOrElse(""))
        }
      case _ => Vector.empty
    }

  /**
   * Lines from `fetch`, polled every `interval` until both sentinels have
   * been seen or `deadline` passes; one fetch without `waitForSentinel`.
   */
  def poll(fetch: () => Future[Vector[LogLine]],
           waitForSentinel: Boolean,
           deadline: Instant,
           interval: FiniteDuration)(implicit as: ActorSystem, ec: ExecutionContext): Source[LogLine, NotUsed] =
    Source
      .unfoldAsync[(Int, Int, Boolean), Vector[LogLine]]((0, 0, true)) {
        case (_, _, false) => Future.successful(None)
        case (sentinels, round, true) =>
          val wait = if (round == 0) Future.unit else after(interval)(Future.unit)
          wait.flatMap(_ => fetch()).map { lines =>
            val seen = sentinels + lines.count(_.log == Container.ACTIVATION_LOG_SENTINEL)
            val more = waitForSentinel && seen < 2 && Instant.now().isBefore(deadline)
            Some((seen, round + 1, more) -> lines)
          }
      }
      .mapConcat(identity)
}
