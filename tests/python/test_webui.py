"""The chat page at `/` in a real browser: Debian's headless Chromium driven by Selenium
through Debian's chromedriver (both named explicitly, so Selenium's manager neither
downloads a driver nor reports statistics: nothing here reaches outside). Run by
scripts/client-tests.sh against `ferrox serve` (the default model, and the same file as
`second`); a screenshot of the page goes to target/webui.png on every run.

Checks: a message gets a streamed answer with its tokens/s; Stop ends a long answer and
keeps what came; another model answers when picked; `regenerate` answers again and keeps
the earlier version as a branch; after a reload the conversation is still there; a server
with `--api-key` has the page ask for the key, and then chat.
"""

import os
import shutil
import sys

import pytest

ROOT = os.environ.get("FERROX_URL", "http://127.0.0.1:8080/v1").removesuffix("/v1")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
BIN = os.environ.get("FERROX_BIN", "target/debug/ferrox")


@pytest.fixture(scope="module")
def browser():
    os.environ["SE_OFFLINE"] = "true"
    os.environ["SE_AVOID_STATS"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1200,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait(driver, condition, timeout=120):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: condition(d))


def by_css(driver, css):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, css)


def open_page(driver, max_tokens):
    driver.get(ROOT + "/")
    driver.execute_script(f"localStorage.setItem('ferrox.maxTokens', '\"{max_tokens}\"');"
                          "localStorage.setItem('ferrox.temperature', '\"0\"');")
    driver.get(ROOT + "/")
    wait(driver, lambda d: len(by_css(d, "#model option")) >= 2)


def send(driver, text):
    box = by_css(driver, "#input")[0]
    box.send_keys(text)
    by_css(driver, "#send")[0].click()


def answers(driver):
    return by_css(driver, ".msg.assistant")


def test_a_message_streams_an_answer_with_its_speed(browser):
    open_page(browser, 24)
    by_css(browser, "#new")[0].click()
    send(browser, "Write about the sea.")
    wait(browser, lambda d: "tok/s" in (by_css(d, ".msg.assistant .stats") or [None])[-1].text
         if by_css(d, ".msg.assistant .stats") else False)
    last = answers(browser)[-1]
    assert last.find_element("css selector", ".body").text.strip()
    os.makedirs("target", exist_ok=True)
    browser.save_screenshot("target/webui.png")


def test_stop_ends_a_long_answer_and_keeps_it(browser):
    open_page(browser, 2000)
    by_css(browser, "#new")[0].click()
    send(browser, "Tell me a very long story.")
    wait(browser, lambda d: len(answers(d)) == 1
         and len(answers(d)[0].find_element("css selector", ".body").text) > 20)
    by_css(browser, "#stop")[0].click()
    wait(browser, lambda d: by_css(d, "#send")[0].is_enabled(), timeout=10)
    stats = by_css(browser, ".msg.assistant .stats")[-1].text
    assert stats == "stopped", stats
    assert answers(browser)[-1].find_element("css selector", ".body").text.strip()


def test_another_model_regenerate_and_reload(browser):
    from selenium.webdriver.support.ui import Select

    open_page(browser, 12)
    by_css(browser, "#new")[0].click()
    Select(by_css(browser, "#model")[0]).select_by_value("second")
    send(browser, "Name a colour.")
    wait(browser, lambda d: by_css(d, ".msg.assistant .stats")
         and "tok/s" in by_css(d, ".msg.assistant .stats")[-1].text)
    assert answers(browser)[-1].find_element("css selector", ".who").text.startswith("second")
    first = answers(browser)[-1].find_element("css selector", ".body").text
    by_css(browser, ".regenerate")[0].click()
    wait(browser, lambda d: len(answers(d)) == 1 and by_css(d, ".msg.assistant .stats")
         and "tok/s" in by_css(d, ".msg.assistant .stats")[-1].text)
    assert answers(browser)[-1].find_element("css selector", ".body").text == first  # greedy
    # The version before the regeneration is kept as a branch.
    assert any(li.text.startswith("Name a colour. (earlier branch)")
               for li in by_css(browser, "#convs li"))
    browser.get(ROOT + "/")
    wait(browser, lambda d: any(li.text.startswith("Name a colour.")
                                for li in by_css(d, "#convs li")))
    assert by_css(browser, ".msg.user")[0].text.endswith("Name a colour.")
    assert len(answers(browser)) == 1


def test_markdown_shows_code_as_written_and_escapes_html(browser):
    open_page(browser, 8)
    samples = [
        'x = "a # b"  # it\'s a comment\nprint(x, 3.5, class_)',
        "fn main() { let s = \"<b>\"; } // <script>alert(1)</script>",
    ]
    for code in samples:
        shown = browser.execute_script(
            "const d = document.createElement('div');"
            "d.innerHTML = markdown('```py\\n' + arguments[0] + '\\n```');"
            "return [d.textContent, d.querySelectorAll('span').length, d.querySelectorAll('script, b').length];",
            code)
        assert shown[0] == code + "\n", shown
        assert shown[1] > 0 and shown[2] == 0, shown
    text = browser.execute_script(
        "const d = document.createElement('div');"
        "d.innerHTML = markdown('**bold** <img src=x onerror=alert(1)> [a](javascript:alert(1))');"
        "return [d.querySelectorAll('img, a').length, d.textContent];")
    assert text[0] == 0, text


def test_a_server_with_a_key_is_asked_for_it(browser):
    """A server started with --api-key: the page's first call gets a 401, the page asks for
    the key, keeps it, and chats."""
    import socket
    import subprocess
    import time

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    model = subprocess.run([BIN, "pull"], capture_output=True, text=True, check=True).stdout.strip()
    server = subprocess.Popen([BIN, "serve", "--port", str(port), "-m", model, "--api-key", "sk-page",
                               "-t", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import urllib.request
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except Exception:
                assert time.time() < deadline and server.poll() is None, "the keyed server did not start"
                time.sleep(0.2)
        base = f"http://127.0.0.1:{port}/"
        browser.get(base + "health")  # the same origin, no script: its storage set first
        browser.execute_script("localStorage.clear(); localStorage.setItem('ferrox.maxTokens', '\"8\"');")
        browser.get(base)
        # `switch_to.alert` raises until the prompt is up, and WebDriverWait only ignores
        # missing elements by default: wait on the alert condition, which polls.
        from selenium.webdriver.support import expected_conditions
        alert = wait(browser, expected_conditions.alert_is_present())
        alert.send_keys("sk-page")
        alert.accept()
        wait(browser, lambda d: len(by_css(d, "#model option")) >= 1)
        send(browser, "Hello")
        wait(browser, lambda d: by_css(d, ".msg.assistant .stats")
             and "tok/s" in by_css(d, ".msg.assistant .stats")[-1].text)
        assert browser.execute_script("return localStorage.getItem('ferrox.apiKey')") == '"sk-page"'
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    if not shutil.which(CHROMIUM) or not shutil.which(CHROMEDRIVER):
        sys.exit("chromium and chromedriver are needed (Debian: chromium chromium-driver)")
    sys.exit(pytest.main([__file__, "-q"]))
