/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not
 * use this file except in compliance with the License. You may obtain a copy
 * of the License at http://www.apache.org/licenses/LICENSE-2.0
 */

package org.apache.openwhisk.core.containerpool.wasm

import java.time.Instant

import scala.concurrent.{ExecutionContext, Future}
import scala.concurrent.duration._

import org.apache.pekko.actor.ActorSystem
import org.apache.pekko.http.scaladsl.Http
import org.apache.pekko.http.scaladsl.model._
import org.apache.pekko.pattern.after
import org.apache.pekko.stream.scaladsl.Source
import org.apache.pekko.util.ByteString
import spray.json._
import spray.json.DefaultJsonProtocol._

import org.apache.openwhisk.common.{Logging, TransactionId}
import org.apache.openwhisk.core.containerpool._
import org.apache.openwhisk.core.entity.{ActivationResponse, ByteSize}
import org.apache.openwhisk.http.Messages

/**
 * One OpenWhisk container on a Luge executor. Init and run go to
 * `/{id}/init` and `/{id}/run` (same bodies and replies as an action
 * proxy's `/init` and `/run`), logs come from `/{id}/logs`, destroy is
 * `/{id}/destroy`. Suspend and resume only close and reopen the HTTP
 * connections: an idle sandbox uses no CPU.
 */
class WasmContainer(protected val id: ContainerId,
                    protected val addr: ContainerAddress,
                    config: WasmContainerFactoryConfig)(implicit protected val as: ActorSystem,
                                                        protected val ec: ExecutionContext,
                                                        protected val logging: Logging)
    extends Container {

  private val base = s"http://${addr.host}:${addr.port}/${id.asString}"

  override def initialize(initializer: JsObject, timeout: FiniteDuration, maxConcurrent: Int)(
    implicit transid: TransactionId): Future[Interval] = {
    containerHttpMaxConcurrent = maxConcurrent
    containerHttpTimeout = timeout
    callContainer(s"/${id.asString}/init", JsObject("value" -> initializer), timeout, maxConcurrent, retry = true)
      .flatMap { result =>
        if (result.ok) {
          Future.successful(result.interval)
        } else if (result.interval.duration >= timeout) {
          Future.failed(
            InitializationError(
              result.interval,
              ActivationResponse.developerError(Messages.timedoutActivation(timeout, true))))
        } else {
          Future.failed(
            InitializationError(result.interval, ActivationResponse.processInitResponseContent(result.response, logging)))
        }
      }
  }

  override def run(parameters: JsObject, environment: JsObject, timeout: FiniteDuration, maxConcurrent: Int)(
    implicit transid: TransactionId): Future[(Interval, ActivationResponse)] = {
    val body = JsObject(JsObject("value" -> parameters).fields ++ environment.fields)
    callContainer(s"/${id.asString}/run", body, timeout, maxConcurrent, retry = false).map { result =>
      val response =
        if (result.interval.duration >= timeout)
          ActivationResponse.developerError(Messages.timedoutActivation(timeout, false))
        else ActivationResponse.processRunResponseContent(result.response, logging)
      (result.interval, response)
    }
  }

  override def destroy()(implicit transid: TransactionId): Future[Unit] = {
    val request = HttpRequest(HttpMethods.POST, s"$base/destroy", entity = HttpEntity(ContentTypes.`application/json`, "{}"))
    Http()
      .singleRequest(request)
      .flatMap(_.discardEntityBytes().future())
      .recover { case t => logging.warn(this, s"destroy of $id failed: $t") }
      .flatMap(_ => super.destroy())
      .map(_ => ())
  }

  /**
   * Luge's log lines as Docker's json-file lines, which the invoker's
   * DockerToActivationLogStore already parses. With `waitForSentinel`, polls
   * until both streams carry the sentinel (or the configured wait ends).
   */
  override def logs(limit: ByteSize, waitForSentinel: Boolean)(
    implicit transid: TransactionId): Source[ByteString, Any] = {
    val deadline = Instant.now().plusMillis(config.logWaitTimeout.toMillis)
    def fetch(seen: Vector[JsObject]): Future[Vector[JsObject]] =
      Http()
        .singleRequest(HttpRequest(HttpMethods.GET, s"$base/logs"))
        .flatMap(r => r.entity.toStrict(config.logWaitTimeout).map(_.data.utf8String))
        .map(_.parseJson.asJsObject.fields.get("logs") match {
          case Some(JsArray(lines)) => seen ++ lines.collect { case o: JsObject => o }
          case _                    => seen
        })
        .flatMap { lines =>
          def sentinel(stream: String) =
            lines.exists(l =>
              l.fields.get("stream").contains(JsString(stream)) &&
                l.fields.get("log").contains(JsString(Container.ACTIVATION_LOG_SENTINEL)))
          val complete = sentinel("stdout") && sentinel("stderr")
          if (!waitForSentinel || complete || Instant.now().isAfter(deadline)) Future.successful(lines)
          else after(config.logPollInterval)(fetch(lines))
        }
    Source
      .future(fetch(Vector.empty))
      .mapConcat(identity)
      .map { line =>
        val fields = line.fields
        val time = fields.get("time_ms").collect { case JsNumber(ms) => Instant.ofEpochMilli(ms.toLong) }
        val docker = JsObject(
          "log" -> JsString(fields.get("log").collect { case JsString(s) => s }.getOrElse("") + "\n"),
          "stream" -> fields.getOrElse("stream", JsString("stdout")),
          "time" -> JsString(time.getOrElse(Instant.now()).toString))
        ByteString(docker.compactPrint + "\n")
      }
      .statefulMapConcat { () =>
        // Keep lines up to the log limit, as the Docker factory truncates.
        var total = 0L
        line =>
          total += line.length
          if (total <= limit.toBytes) List(line) else Nil
      }
  }
}
