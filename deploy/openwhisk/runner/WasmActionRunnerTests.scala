/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not
 * use this file except in compliance with the License. You may obtain a copy
 * of the License at http://www.apache.org/licenses/LICENSE-2.0
 */

package runtime.actionContainers

import java.io.ByteArrayOutputStream
import java.nio.file.{Files, Paths}
import java.util.Base64
import java.util.zip.{ZipEntry, ZipOutputStream}

import actionContainers.{ActionContainer, BasicActionRunnerTests}
import org.apache.pekko.actor.ActorSystem
import org.junit.runner.RunWith
import org.scalatest.BeforeAndAfterAll
import org.scalatestplus.junit.JUnitRunner

/**
 * OpenWhisk's canonical runtime suite (BasicActionRunnerTests, unchanged)
 * against the `luge proxy` action image, the way every OpenWhisk runtime
 * repository runs it: `ActionContainer.withContainer` starts the image with
 * `docker run`, and the suite speaks the action-proxy protocol to it.
 *
 * The actions are the example Wasm modules (`target/wasm`, built from
 * `actions/`), sent base64-encoded as `wsk` sends binary code.
 * `LUGE_RUNNER_IMAGE` names the image (check.sh's stand-in `docker` starts a
 * `luge proxy` for it).
 */
@RunWith(classOf[JUnitRunner])
class WasmActionRunnerTests extends BasicActionRunnerTests with BeforeAndAfterAll {

  // What OpenWhisk's runtime suites get from WskActorSystem: one actor
  // system for the HTTP client of ActionContainer.
  implicit val actorSystem: ActorSystem = ActorSystem("luge-runner-tests")

  override def afterAll(): Unit = {
    actorSystem.terminate()
    super.afterAll()
  }

  private val image = sys.env.getOrElse("LUGE_RUNNER_IMAGE", "luge/action-wasm")
  private val wasmDir = sys.env.getOrElse("LUGE_WASM_DIR", "target/wasm")

  /** The module's bytes as the action's code is uploaded: here the bare .wasm. */
  protected def pack(name: String, wasm: Array[Byte]): Array[Byte] = wasm

  private def code(name: String): String =
    Base64.getEncoder.encodeToString(pack(name, Files.readAllBytes(Paths.get(wasmDir, s"$name.wasm"))))

  override def withActionContainer(env: Map[String, String] = Map.empty)(
    code: ActionContainer => Unit): (String, String) =
    ActionContainer.withContainer(image, env)(code)

  override val testNoSourceOrExec = TestConfig("")
  // A Wasm action is a native command: its result is its last stdout line,
  // and one that is not a dictionary stays in its log, where the author sees
  // what it printed (the suite's allowance "for native runtimes").
  override val testNotReturningJson = TestConfig(code("notdict"), enforceEmptyOutputStream = false)
  override val testInitCannotBeCalledMoreThanOnce = TestConfig(code("echo"))
  override val testEntryPointOtherThanMain = TestConfig(code("entry"), main = "niam")
  override val testEcho = TestConfig(code("echo"))
  override val testUnicode = TestConfig(code("unicode"))
  override val testEnv = TestConfig(code("env"))
  override val testEnvParameters = TestConfig(code("envvars"))
  override val testLargeInput = TestConfig(code("echo"))
}

/** The same suite with each module in a zip, as `wsk action create` uploads it. */
@RunWith(classOf[JUnitRunner])
class WasmZipActionRunnerTests extends WasmActionRunnerTests {
  override protected def pack(name: String, wasm: Array[Byte]): Array[Byte] = {
    val bytes = new ByteArrayOutputStream()
    val zip = new ZipOutputStream(bytes)
    zip.putNextEntry(new ZipEntry(s"$name.wasm"))
    zip.write(wasm)
    zip.closeEntry()
    zip.close()
    bytes.toByteArray
  }
}
