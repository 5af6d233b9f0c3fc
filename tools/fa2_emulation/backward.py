# Emulates attention_backward_dkdv_fa2_kernel and attention_backward_dq_fa2_kernel lane by lane
# (grouped-query: 2 query heads on 1 key/value head) and compares with the direct backward.
# K and V fragments are read from a 64-row tile as the shared-memory path does (the register path
# at head size 64 loads the same values). Run: /usr/bin/python3 backward.py 64|128
import numpy as np
import os
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fragments.py')).read())
NKV=1; group=NH//NKV
K1=k_all[:,0]; V1=v_all[:,0]  # one kv head
dO=rng.standard_normal((T_,NH,HS))
# reference forward/backward
lse=np.zeros((NH,T_)); O=np.zeros((T_,NH,HS)); dQr=np.zeros((T_,NH,HS)); dKr=np.zeros((T_,HS)); dVr=np.zeros((T_,HS))
for h in range(NH):
  S=(q_all[:,h]@K1.T)*scale; S[np.triu_indices(T_,1)]=-np.inf
  mx=S.max(1,keepdims=True); P=np.exp(S-mx); l=P.sum(1,keepdims=True); P/=l
  lse[h]=(mx+np.log(l))[:,0]; O[:,h]=P@V1
  dP=dO[:,h]@V1.T; Dv=(dO[:,h]*O[:,h]).sum(1,keepdims=True); dS=P*(dP-Dv)*scale
  dQr[:,h]=dS@K1; dKr+=dS.T@q_all[:,h]; dVr+=P.T@dO[:,h]
D=np.array([(dO[:,h]*O[:,h]).sum(1) for h in range(NH)])
L2=lse*1.4426950408889634
def tile(X,t0,rows=64):
  Tt=np.zeros((rows,HS)); n=max(0,min(rows,T_-t0)); Tt[:n]=X[t0:t0+n]; return Tt
KQ=32 if HS>64 else 64  # query rows per tile of the dK/dV kernel (kDkdvQueryRows)
def a_tile(Tt,r):  # a_from_tile per kk: rows r (= warp*16) + g of a shared tile
  out=[]
  for kk in range(HS//16):
    fr=[]
    for lane in range(32):
      g,qd=lane//4,lane%4
      p=lambda rr,c: Tt[rr,c:c+2]
      fr.append([p(r+g,kk*16+2*qd),p(r+g+8,kk*16+2*qd),p(r+g,kk*16+2*qd+8),p(r+g+8,kk*16+2*qd+8)])
    out.append(A_from_frag(fr))
  return out
def a_rows(X,r0):  # A fragments as matrix 16 x HS split per kk
  out=[]
  for kk in range(HS//16):
    fr=[]
    for lane in range(32):
      g,qd=lane//4,lane%4
      def ld(r,c): return X[r,c:c+2] if r<T_ else np.zeros(2)
      r=r0+g
      fr.append([ld(r,kk*16+2*qd),ld(r+8,kk*16+2*qd),ld(r,kk*16+2*qd+8),ld(r+8,kk*16+2*qd+8)])
    out.append(A_from_frag(fr))
  return out
def b_across(Tt,nb,kk):
  return B_from_frag([[Tt[nb*8+l//4,kk*16+2*(l%4):kk*16+2*(l%4)+2],Tt[nb*8+l//4,kk*16+2*(l%4)+8:kk*16+2*(l%4)+10]] for l in range(32)])
def b_down(Tt,kk,dn):
  return B_from_frag([[np.array([Tt[kk*16+2*(l%4),dn*8+l//4],Tt[kk*16+2*(l%4)+1,dn*8+l//4]]),np.array([Tt[kk*16+2*(l%4)+8,dn*8+l//4],Tt[kk*16+2*(l%4)+9,dn*8+l//4]])] for l in range(32)])
def pfrag(s,kk):
  return A_from_frag([[np.array([s[2*kk][l][0],s[2*kk][l][1]]),np.array([s[2*kk][l][2],s[2*kk][l][3]]),np.array([s[2*kk+1][l][0],s[2*kk+1][l][1]]),np.array([s[2*kk+1][l][2],s[2*kk+1][l][3]])] for l in range(32)])
dK=np.zeros((T_,HS)); dV=np.zeros((T_,HS)); dQ=np.zeros((T_,NH,HS))
nblk=(T_+63)//64
for blk in range(nblk):  # dkdv
  k0=blk*64
  Kt=tile(K1,k0); Vt=tile(V1,k0)
  for warp in range(4):
    ka=a_tile(Kt,warp*16); va=a_tile(Vt,warp*16)
    dk=[np.zeros((16,8)) for _ in range(HS//8)]; dv=[np.zeros((16,8)) for _ in range(HS//8)]
    first=k0//KQ; n_tiles=(T_+KQ-1)//KQ-first
    for i in range(group*n_tiles):
      h=i//n_tiles; t0=(first+i%n_tiles)*KQ
      Qs=tile(q_all[:,h],t0,KQ); dOs=tile(dO[:,h],t0,KQ)
      l2=np.array([L2[h,t0+r] if t0+r<T_ else np.inf for r in range(KQ)]); Dq=np.array([D[h,t0+r] if t0+r<T_ else 0 for r in range(KQ)])
      st=[];dpt=[]
      for nb in range(KQ//8):
        a=np.zeros((16,8));b=np.zeros((16,8))
        for kk in range(HS//16):
          a=mma(a,ka[kk],b_across(Qs,nb,kk)); b=mma(b,va[kk],b_across(dOs,nb,kk))
        st.append(C_to_frag(a)); dpt.append(C_to_frag(b))
      st=np.array(st);dpt=np.array(dpt)
      for nb in range(KQ//8):
        for lane in range(32):
          g,qd=lane//4,lane%4
          for i2 in range(4):
            col=nb*8+2*qd+(i2%2); key=k0+warp*16+g+(8 if i2>=2 else 0)
            p=np.exp2(st[nb][lane][i2]*sl2-l2[col]) if key<=t0+col else 0.0
            st[nb][lane][i2]=p; dpt[nb][lane][i2]=p*(dpt[nb][lane][i2]-Dq[col])*scale
      for kk in range(KQ//16):
        pa=pfrag(st,kk); da=pfrag(dpt,kk)
        for dn in range(HS//8):
          dv[dn]=mma(dv[dn],pa,b_down(dOs,kk,dn)); dk[dn]=mma(dk[dn],da,b_down(Qs,kk,dn))
    for dn in range(HS//8):
      for rr in range(16):
        r=k0+warp*16+rr
        if r<T_: dK[r,dn*8:dn*8+8]=dk[dn][rr]; dV[r,dn*8:dn*8+8]=dv[dn][rr]
for h in range(NH):  # dq
  for blk in range(nblk):
    q0=blk*64
    for warp in range(4):
      qa=a_rows(q_all[:,h],q0+warp*16); oa=a_rows(dO[:,h],q0+warp*16)
      dq=[np.zeros((16,8)) for _ in range(HS//8)]
      last_q=min(q0+64,T_)-1
      for j in range(last_q//64+1):
        k0=j*64; Ks=tile(K1,k0); Vs=tile(V1,k0)
        s=[];dp=[]
        for nb in range(8):
          a=np.zeros((16,8));b=np.zeros((16,8))
          for kk in range(HS//16):
            a=mma(a,qa[kk],b_across(Ks,nb,kk)); b=mma(b,oa[kk],b_across(Vs,nb,kk))
          s.append(C_to_frag(a)); dp.append(C_to_frag(b))
        s=np.array(s);dp=np.array(dp)
        for nb in range(8):
          for lane in range(32):
            g,qd=lane//4,lane%4
            for i in range(4):
              key=k0+nb*8+2*qd+(i%2); r=q0+warp*16+g+(8 if i>=2 else 0)
              p=np.exp2(s[nb][lane][i]*sl2-L2[h,r]) if (r<T_ and key<=r) else 0.0
              dp[nb][lane][i]=p*(dp[nb][lane][i]-(D[h,r] if r<T_ else 0))*scale
        for kk in range(4):
          da=pfrag(dp,kk)
          for dn in range(HS//8): dq[dn]=mma(dq[dn],da,b_down(Ks,kk,dn))
      for dn in range(HS//8):
        for rr in range(16):
          r=q0+warp*16+rr
          if r<T_: dQ[r,h,dn*8:dn*8+8]=dq[dn][rr]
print('dQ',np.abs(dQ-dQr).max(),'dK',np.abs(dK-dKr).max(),'dV',np.abs(dV-dVr).max(), 'scale', np.abs(dKr).max())
err = max(np.abs(dQ - dQr).max(), np.abs(dK - dKr).max(), np.abs(dV - dVr).max())
sys.exit(0 if err < 1e-4 else 1)
