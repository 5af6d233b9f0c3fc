# The mma.sync m16n8k16 fragment layouts of engine/backend/cuda/attention_fa2.cu, in numpy, and
# the test data: T = 150 (not a multiple of the 64-row tiles), 2 query heads, head size from argv.
import numpy as np
rng=np.random.default_rng(0)
import sys
T_,NH=150,2
HS=int(sys.argv[1]) if len(sys.argv)>1 else 64  # head size: 64 or 128
B=1
q_all=rng.standard_normal((T_,NH,HS)).astype(np.float32)
k_all=rng.standard_normal((T_,NH,HS)).astype(np.float32)
v_all=rng.standard_normal((T_,NH,HS)).astype(np.float32)
scale=1/np.sqrt(HS); sl2=scale*1.4426950408889634
def mma(d,A,Bm):  # d (16x8) += A(16x16) @ B(16x8); we emulate via full matrices
    return d + A@Bm
def frag_to_C(c):  # c[lane][4] -> 16x8
    M=np.zeros((16,8));
    for lane in range(32):
        g,q=lane//4,lane%4
        M[g,2*q]=c[lane][0];M[g,2*q+1]=c[lane][1];M[g+8,2*q]=c[lane][2];M[g+8,2*q+1]=c[lane][3]
    return M
def C_to_frag(M):
    return [[M[l//4,2*(l%4)],M[l//4,2*(l%4)+1],M[l//4+8,2*(l%4)],M[l//4+8,2*(l%4)+1]] for l in range(32)]
def A_from_frag(a):  # a[lane][4] each a pair -> 16x16
    M=np.zeros((16,16))
    for lane in range(32):
        g,q=lane//4,lane%4
        M[g,2*q:2*q+2]=a[lane][0];M[g+8,2*q:2*q+2]=a[lane][1];M[g,2*q+8:2*q+10]=a[lane][2];M[g+8,2*q+8:2*q+10]=a[lane][3]
    return M
def B_from_frag(b):  # b[lane][2] pairs -> 16x8 (k x n)
    M=np.zeros((16,8))
    for lane in range(32):
        g,q=lane//4,lane%4
        M[2*q:2*q+2,g]=b[lane][0];M[2*q+8:2*q+10,g]=b[lane][1]
    return M
