# Emulates attention_forward_fa2_kernel's index math lane by lane (fragment layouts per the PTX
# ISA) and compares with a direct causal attention. Run: /usr/bin/python3 forward.py 64|128
import os
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fragments.py')).read())
out=np.zeros((T_,NH,HS)); lse=np.zeros((NH,T_))
for h in range(NH):
  Q,K,V=q_all[:,h],k_all[:,h],v_all[:,h]
  for blk in range((T_+63)//64):
    q0=blk*64
    for warp in range(4):
      rows0=[q0+warp*16+l//4 for l in range(32)]
      qa=[]
      for kk in range(HS//16):
        fr=[]
        for lane in range(32):
          g,q=lane//4,lane%4; r0=q0+warp*16+g; r1=r0+8
          def ld(r,c): return Q[r,c:c+2] if r<T_ else np.zeros(2)
          fr.append([ld(r0,kk*16+2*q),ld(r1,kk*16+2*q),ld(r0,kk*16+2*q+8),ld(r1,kk*16+2*q+8)])
        qa.append(A_from_frag(fr))
      o=[np.zeros((16,8)) for _ in range(HS//8)]
      m0=np.full(32,-np.inf);m1=np.full(32,-np.inf);l0=np.zeros(32);l1=np.zeros(32)
      last_q=min(q0+64,T_)-1
      for j in range(last_q//64+1):
        k0=j*64
        Kt=np.zeros((64,HS));Vt=np.zeros((64,HS))
        n=min(64,T_-k0); Kt[:n]=K[k0:k0+n]; Vt[:n]=V[k0:k0+n]
        s=[]
        for nb in range(8):
          d=np.zeros((16,8))
          for kk in range(HS//16):
            bf=[]
            for lane in range(32):
              g,q=lane//4,lane%4
              kr=(nb*8+g, kk*16+2*q)
              bf.append([Kt[kr[0],kr[1]:kr[1]+2],Kt[kr[0],kr[1]+8:kr[1]+10]])
            d=mma(d,qa[kk],B_from_frag(bf))
          s.append(C_to_frag(d))
        s=np.array(s) # [nb][lane][4]
        mx0=np.full(32,-np.inf);mx1=np.full(32,-np.inf)
        for nb in range(8):
          for lane in range(32):
            g,q=lane//4,lane%4;r0=q0+warp*16+g;r1=r0+8
            for i in range(4):
              key=k0+nb*8+2*q+(i%2); r=r0 if i<2 else r1
              s[nb][lane][i]=s[nb][lane][i]*sl2 if key<=r else -np.inf
              if i<2: mx0[lane]=max(mx0[lane],s[nb][lane][i])
              else: mx1[lane]=max(mx1[lane],s[nb][lane][i])
        for lane in range(32):  # quad reduce
          base=lane//4*4
          mx0[lane]=max(mx0[base:base+4]); mx1[lane]=max(mx1[base:base+4])
        # careful: above modifies in place progressively; recompute properly
        n0=np.maximum(m0,mx0);n1=np.maximum(m1,mx1)
        c0=np.exp2(m0-n0);c1=np.exp2(m1-n1);m0,m1=n0,n1
        sum0=np.zeros(32);sum1=np.zeros(32)
        for nb in range(8):
          for lane in range(32):
            s[nb][lane][0]=np.exp2(s[nb][lane][0]-n0[lane]);s[nb][lane][1]=np.exp2(s[nb][lane][1]-n0[lane])
            s[nb][lane][2]=np.exp2(s[nb][lane][2]-n1[lane]);s[nb][lane][3]=np.exp2(s[nb][lane][3]-n1[lane])
            sum0[lane]+=s[nb][lane][0]+s[nb][lane][1];sum1[lane]+=s[nb][lane][2]+s[nb][lane][3]
        l0=l0*c0+sum0;l1=l1*c1+sum1
        for dn in range(HS//8):
          of=C_to_frag(o[dn])
          for lane in range(32):
            of[lane][0]*=c0[lane];of[lane][1]*=c0[lane];of[lane][2]*=c1[lane];of[lane][3]*=c1[lane]
          o[dn]=frag_to_C(of)
        for kk in range(4):
          pa=[[np.array([s[2*kk][l][0],s[2*kk][l][1]]),np.array([s[2*kk][l][2],s[2*kk][l][3]]),np.array([s[2*kk+1][l][0],s[2*kk+1][l][1]]),np.array([s[2*kk+1][l][2],s[2*kk+1][l][3]])] for l in range(32)]
          A=A_from_frag(pa)
          for dn in range(HS//8):
            bf=[]
            for lane in range(32):
              g,q=lane//4,lane%4
              key=kk*16+2*q; dim=dn*8+g
              bf.append([np.array([Vt[key,dim],Vt[key+1,dim]]),np.array([Vt[key+8,dim],Vt[key+9,dim]])])
            o[dn]=mma(o[dn],A,B_from_frag(bf))
      for lane in range(32):
        base=lane//4*4
      L0=np.array([l0[l//4*4:l//4*4+4].sum() for l in range(32)]);L1=np.array([l1[l//4*4:l//4*4+4].sum() for l in range(32)])
      for lane in range(32):
        g,q=lane//4,lane%4;r0=q0+warp*16+g;r1=r0+8
        for half,r in ((0,r0),(1,r1)):
          if r>=T_: continue
          L=L1[lane] if half else L0[lane]
          for dn in range(HS//8):
            of=C_to_frag(o[dn])[lane]
            out[r,h,dn*8+2*q]=of[2*half]/L; out[r,h,dn*8+2*q+1]=of[2*half+1]/L
          if q==0: lse[h,r]=(m1[lane] if half else m0[lane])*np.log(2)+np.log(L)
# reference
ref=np.zeros_like(out); rl=np.zeros_like(lse)
for h in range(NH):
  S=(q_all[:,h]@k_all[:,h].T)*scale
  S[np.triu_indices(T_,1)]=-np.inf
  mx=S.max(1,keepdims=True); P=np.exp(S-mx); l=P.sum(1,keepdims=True)
  ref[:,h]=(P/l)@v_all[:,h]; rl[h]=(mx+np.log(l))[:,0]
print('max out err',np.abs(out-ref).max(),'lse err',np.abs(lse-rl).max())
err = max(np.abs(out - ref).max(), np.abs(lse - rl).max())
sys.exit(0 if err < 1e-4 else 1)
