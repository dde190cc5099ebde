/*
 * A watchdog over every test of the UCT suites: a test that runs past
 * RC_GDR_TEST_WATCHDOG_S (420 s; 0: off) gets every thread's stack printed
 * (gdb, where there is one) and the process ends with exit status 124, as
 * the runner's own timeout would end it, only sooner and with the evidence
 * a hang that does not reproduce at will needs. Every wait of a test is
 * bounded already (uct_test_timeout_s); this is for a call that never
 * returns.
 *
 * See file LICENSE for terms.
 */

#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


namespace {

class test_watchdog : public testing::EmptyTestEventListener {
public:
    explicit test_watchdog(unsigned limit_s) : m_limit_s(limit_s)
    {
        pthread_t thread;

        if (pthread_create(&thread, nullptr, watch, this) == 0) {
            pthread_detach(thread);
        }
    }

    void OnTestStart(const testing::TestInfo &info) override
    {
        std::string name = std::string(info.test_suite_name()) + "." +
                           info.name();

        pthread_mutex_lock(&m_lock);
        snprintf(m_name, sizeof(m_name), "%s", name.c_str());
        m_started = time(nullptr);
        pthread_mutex_unlock(&m_lock);
    }

    void OnTestEnd(const testing::TestInfo &) override
    {
        pthread_mutex_lock(&m_lock);
        m_started = 0;
        pthread_mutex_unlock(&m_lock);
    }

private:
    static void *watch(void *arg)
    {
        test_watchdog *self = static_cast<test_watchdog*>(arg);
        pid_t pid           = getpid();
        time_t started;
        char name[256];

        for (;;) {
            sleep(1);
            if (getpid() != pid) {
                return nullptr; /* not in a forked child */
            }
            pthread_mutex_lock(&self->m_lock);
            started = self->m_started;
            snprintf(name, sizeof(name), "%s", self->m_name);
            pthread_mutex_unlock(&self->m_lock);
            if ((started != 0) &&
                (time(nullptr) - started >= (time_t)self->m_limit_s)) {
                self->bark(name);
            }
        }
    }

    /* The stacks of every thread, then the end of the process */
    void bark(const char *name)
    {
        char pid[32];
        pid_t child;

        fprintf(stdout, "\nWATCHDOG: %s has run %u s "
                "(RC_GDR_TEST_WATCHDOG_S): every thread's stack follows, "
                "then exit 124\n", name, m_limit_s);
        fflush(stdout);
        snprintf(pid, sizeof(pid), "%d", (int)getpid());
        child = fork();
        if (child == 0) {
            dup2(STDOUT_FILENO, STDERR_FILENO);
            execlp("gdb", "gdb", "-p", pid, "-batch", "-nx", "-ex",
                   "thread apply all bt", (char*)nullptr);
            fprintf(stdout, "WATCHDOG: no gdb to print the stacks with\n");
            _exit(127);
        }
        if (child > 0) {
            waitpid(child, nullptr, 0);
        }
        fflush(stdout);
        _exit(124);
    }

    const unsigned  m_limit_s;
    pthread_mutex_t m_lock    = PTHREAD_MUTEX_INITIALIZER;
    time_t          m_started = 0;
    char            m_name[256] = "";
};

} // namespace


void uct_rc_gdr_test_watchdog_install()
{
    const char *env = getenv("RC_GDR_TEST_WATCHDOG_S");
    unsigned limit  = (env != nullptr) ? (unsigned)atoi(env) : 420;

    if (limit > 0) {
        /* gtest owns the listener from here */
        testing::UnitTest::GetInstance()->listeners().Append(
                new test_watchdog(limit));
    }
}
