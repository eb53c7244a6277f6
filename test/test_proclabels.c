/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_proclabels.c - what a cgroup path vouches for (node/proclabels.c),
 * on the paths Slurm and the kubelet make, and on the same names where a
 * user could make them: in a subtree systemd delegated to them, below
 * another's cgroup, outside the reader's cgroup namespace, for another uid.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "proclabels.h"

/* What text vouches for, for a process of uid 1000. */
static proc_vouched parse(const char *text)
{
    proc_vouched v;
    memset(&v, 0x55, sizeof(v)); /* every field must be written */
    proclabels_parse_cgroup(text, 1000, &v);
    return v;
}

static void test_slurm_v2(void **state)
{
    (void)state;
    proc_vouched v = parse("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n");
    assert_string_equal(v.slurm_job, "123");
    v = parse("0::/system.slice/node7_slurmstepd.scope/job_9/step_batch/user/task_0\n");
    assert_string_equal(v.slurm_job, "9");
    assert_string_equal(v.pod, "");
}

static void test_slurm_v1(void **state)
{
    (void)state;
    proc_vouched v = parse("12:pids:/user.slice/user-1000.slice/session-3.scope\n"
                           "4:memory:/slurm/uid_1000/job_77/step_0/task_1\n"
                           "1:name=systemd:/system.slice/slurmd.service\n");
    assert_string_equal(v.slurm_job, "77");
    v = parse("4:memory:/slurm_node7/uid_1000/job_78/step_0\n");
    assert_string_equal(v.slurm_job, "78");
}

/* Names a user can give cgroups of their own, or another user's job. */
static void test_slurm_names_elsewhere(void **state)
{
    (void)state;
    static const char *const forged[] = {
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_5/x\n",
        "0::/user.slice/user-1000.slice/user@1000.service/system.slice/slurmstepd.scope/"
        "job_5/step_0\n",
        "0::/system.slice/docker-ab12.scope/system.slice/slurmstepd.scope/job_5\n",
        "4:memory:/slurm/uid_1001/job_5/step_0\n", /* another user's job */
        "0::/../../system.slice/slurmstepd.scope/job_5/step_0\n",
        "0::/system.slice/slurmstepd.scope/job_5x/step_0\n",
        "0::/system.slice/evil-slurmstepd.scope/job_5/step_0\n",
        "0::/system.slice/slurmstepd.scope\n",
        "garbage without colons /slurm/uid_1000/job_5\n",
        "",
    };
    for (size_t i = 0; i < sizeof(forged) / sizeof(forged[0]); i++) {
        proc_vouched v = parse(forged[i]);
        assert_string_equal(v.slurm_job, "");
        assert_string_equal(v.pod, "");
    }
}

static void test_kubepods(void **state)
{
    (void)state;
    proc_vouched v = parse("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
                           "pod1f2e3d4c_aaaa_bbbb_cccc_0123456789ab.slice/cri-containerd-"
                           "0a1b2c3d4e5f.scope\n");
    assert_string_equal(v.pod, "1f2e3d4c-aaaa-bbbb-cccc-0123456789ab");
    assert_string_equal(v.container, "0a1b2c3d4e5f");
    v = parse("0::/kubepods.slice/kubepods-pod1f2e_aa.slice/docker-beef.scope\n");
    assert_string_equal(v.pod, "1f2e-aa");
    assert_string_equal(v.container, "beef");
    v = parse("3:memory:/kubepods/besteffort/pod1f2e-aa/c0ffee\n");
    assert_string_equal(v.pod, "1f2e-aa");
    assert_string_equal(v.container, "c0ffee");
    v = parse("3:memory:/kubepods/pod1f2e-aa\n");
    assert_string_equal(v.pod, "1f2e-aa");
    assert_string_equal(v.container, "");
    assert_string_equal(v.slurm_job, "");
}

static void test_kubepods_elsewhere(void **state)
{
    (void)state;
    static const char *const forged[] = {
        "0::/user.slice/user-1000.slice/user@1000.service/kubepods/pod1f2e-aa/c0ffee\n",
        "0::/user.slice/kubepods.slice/kubepods-pod1f2e.slice/docker-beef.scope\n",
        "0::/../kubepods.slice/kubepods-pod1f2e.slice/docker-beef.scope\n",
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod1f.slice\n",
        "0::/kubepods.slice/kubepods-podXYZ.slice/docker-beef.scope\n",
    };
    for (size_t i = 0; i < sizeof(forged) / sizeof(forged[0]); i++) {
        proc_vouched v = parse(forged[i]);
        assert_string_equal(v.pod, "");
        assert_string_equal(v.container, "");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slurm_v2),
        cmocka_unit_test(test_slurm_v1),
        cmocka_unit_test(test_slurm_names_elsewhere),
        cmocka_unit_test(test_kubepods),
        cmocka_unit_test(test_kubepods_elsewhere),
    };
    return cmocka_run_group_tests_name("proclabels", tests, NULL, NULL);
}
